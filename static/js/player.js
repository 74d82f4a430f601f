// PhasePlayer: one cursor over the phases of one run (model/phases.js), for the single view and for
// each pane of compare mode. No DOM: whoever owns the player draws in `onChange`.
//
//   const player = new PhasePlayer({ onChange: (player) => draw(player), policies });  policies: /api/policies
//   player.load(events, { follow: false, at: position })  a recorded run: opens at `at` or its first phase
//   player.load([], { follow: true }); player.push(event)  a live run: the newest phase as events arrive
//   player.phase      the phase on screen: { index, step, stepIndex, name, layer, end, walked, walkLength } or null
//   player.cursor     events to fold for it (phase.end); foldPhase(player.events, player.phase) gives the state
//   player.phases     every phase so far; player.stepCount the number of steps
//   player.next() / player.prev()              → / ←          one phase
//   player.nextStep() / player.prevStep()      Shift+→ / ←    one step, at the same kind of phase
//   player.home() / player.end()               Home / End     the run's first and last phase
//   player.seekPhase(i)                        phase i of player.phases
//   player.seekStep(k, position?)              step k (0-based), at the phase nearest `position` (default: its first)
//   player.seekPosition({ stepIndex, name, layer, walked })   the nearest phase (nearestPhase in model/phases.js)
//   player.position()                          where it stands, in that form
//   player.play() / pause() / toggle(); player.playing; player.speed (1 = lecture pace)
//   player.emittedBefore(k) / player.stepAtToken(n)  output tokens before step k; the step that emitted token n
//
// Lock-step: `new PlayerGroup(players, { onChange, align })` moves several players from one set of
// keys. It has the same navigation and play methods; each acts on the leader (players[0], or
// group.setLeader(i)) and then puts every other player at `align(position, leader, follower)`: by
// default the same step index and kind of phase (nearestPhase). An align function may map through
// emittedBefore/stepAtToken to align by tokens emitted instead.

import { nearestPhase, phasesOf, positionOf } from "./model/phases.js";

// How long play lingers on each kind of phase at speed 1, in ms: long enough to say a sentence.
const LINGER = { draft: 1100, rerank: 1300, verify: 1500, accept: 900, commit: 1200 };

export class PhasePlayer {
  constructor({ onChange = () => {}, speed = 1, policies = {} } = {}) {
    this.onChange = onChange;
    this.speed = speed;
    this.policies = policies; // the served policies: which end every step in a rerank (model/phases.js)
    this.events = [];
    this.playing = false;
    this.live = false; // events still arriving
    this.follow = false; // live: stay on the newest phase
    this._phases = [];
    this._dirty = false;
    this._index = -1;
    this._timer = null;
  }

  get phases() {
    if (this._dirty) {
      this._phases = phasesOf(this.events, this.policies);
      this._dirty = false;
    }
    return this._phases;
  }

  get index() {
    return this.follow ? this.phases.length - 1 : Math.min(this._index, this.phases.length - 1);
  }

  get phase() {
    return this.phases[this.index] ?? null;
  }

  get cursor() {
    return this.phase?.end ?? 0;
  }

  get stepCount() {
    const last = this.phases[this.phases.length - 1];
    return last ? last.stepIndex + 1 : 0;
  }

  get atEnd() {
    return this.index >= this.phases.length - 1;
  }

  load(events, { follow = false, at = null } = {}) {
    this._stop();
    this.events = events;
    this._dirty = true;
    this.live = follow;
    this.follow = follow;
    const target = at ? nearestPhase(this.phases, at) : null;
    this._index = target ? target.index : 0;
    this._changed();
  }

  push(event) {
    this.events.push(event);
    this._dirty = true;
    if (event.type === "run_finished" || event.type === "error") this.live = false;
    this._changed();
  }

  position() {
    return this.phase ? positionOf(this.phase) : null;
  }

  seekPhase(index) {
    this._stop();
    this._moveTo(index);
  }

  seekPosition(position) {
    const phase = nearestPhase(this.phases, position);
    if (phase) this.seekPhase(phase.index);
  }

  seekStep(stepIndex, position = null) {
    const clamped = Math.max(0, Math.min(stepIndex, this.stepCount - 1));
    if (position) this.seekPosition({ ...position, stepIndex: clamped });
    else this.seekPosition({ stepIndex: clamped, name: "draft", layer: 0, walked: 0 });
  }

  next() {
    this.seekPhase(this.index + 1);
  }

  prev() {
    this.seekPhase(Math.max(0, this.index - 1));
  }

  nextStep() {
    const here = this.position();
    if (here) this.seekStep(here.stepIndex + 1, here);
  }

  prevStep() {
    const here = this.position();
    if (here) this.seekStep(here.stepIndex - 1, here);
  }

  home() {
    this.seekPhase(0);
  }

  end() {
    this.seekPhase(this.phases.length - 1);
  }

  toggle() {
    if (this.playing) this.pause();
    else this.play();
  }

  play() {
    if (!this.phases.length) return;
    if (this.atEnd) this._moveTo(0);
    this.playing = true;
    this._schedule();
    this._changed();
  }

  pause() {
    this._stop();
    this._changed();
  }

  /** How many output tokens the steps before `stepIndex` emitted. */
  emittedBefore(stepIndex) {
    let total = 0;
    for (const event of this.events) {
      if (event.type !== "step_metrics") continue;
      if (stepIndex-- <= 0) break;
      total = event.new_tokens;
    }
    return total;
  }

  /** The index of the step that emitted output token `n` (0-based), or the last step. */
  stepAtToken(n) {
    let stepIndex = 0;
    for (const event of this.events) {
      if (event.type !== "step_metrics") continue;
      if (event.new_tokens > n) return stepIndex;
      stepIndex += 1;
    }
    return Math.max(0, stepIndex - 1);
  }

  _moveTo(index) {
    const last = this.phases.length - 1;
    this._index = Math.max(0, Math.min(index, last));
    // Stepping back in a live run stops following it; End (or the last phase) follows again.
    this.follow = this.live && this._index === last;
    this._changed();
  }

  _schedule() {
    clearTimeout(this._timer);
    const linger = LINGER[this.phase?.name] ?? 800;
    this._timer = setTimeout(() => this._tick(), linger / this.speed);
  }

  _tick() {
    if (!this.playing) return;
    if (this.atEnd) {
      this.playing = false;
      this._changed();
      return;
    }
    this._moveTo(this.index + 1);
    this._schedule();
  }

  _stop() {
    this.playing = false;
    clearTimeout(this._timer);
  }

  _changed() {
    this.onChange(this);
  }
}

/** Several players driven as one; see the top of this file. */
export class PlayerGroup {
  constructor(players, { onChange = () => {}, align = sameStepAndPhase } = {}) {
    this.players = players;
    this.onChange = onChange;
    this.align = align;
    this.leaderIndex = 0;
  }

  get leader() {
    return this.players[this.leaderIndex];
  }

  get playing() {
    return this.leader?.playing ?? false;
  }

  setLeader(index) {
    this.leaderIndex = index;
    this.sync();
  }

  /** Puts every follower where the leader stands. */
  sync() {
    const here = this.leader?.position();
    if (here) {
      for (const player of this.players) {
        if (player === this.leader) continue;
        const there = this.align(here, this.leader, player);
        if (there) player.seekPosition(there);
      }
    }
    this.onChange(this);
  }

  next() { this._lead((p) => p.next()); }
  prev() { this._lead((p) => p.prev()); }
  nextStep() { this._lead((p) => p.nextStep()); }
  prevStep() { this._lead((p) => p.prevStep()); }
  home() { this._lead((p) => p.home()); }
  end() { this._lead((p) => p.end()); }
  seekStep(stepIndex, position = null) { this._lead((p) => p.seekStep(stepIndex, position)); }
  seekPosition(position) { this._lead((p) => p.seekPosition(position)); }
  pause() { this._lead((p) => p.pause()); }

  play() {
    const leader = this.leader;
    if (!leader || leader.playing) return;
    // While the leader plays, each of its moves carries the others along.
    const own = leader.onChange;
    leader.onChange = (player) => {
      own(player);
      this.sync();
      if (!player.playing) leader.onChange = own;
    };
    leader.play();
  }

  toggle() {
    if (this.playing) this.pause();
    else this.play();
  }

  _lead(move) {
    if (!this.leader) return;
    move(this.leader);
    this.sync();
  }
}

/** The default alignment: the same step index and kind of phase. */
export function sameStepAndPhase(position) {
  return position;
}
