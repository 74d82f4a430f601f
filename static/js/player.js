// Replay control over one run's events: a cursor into the list that live events
// push forward, that Space plays through slowly, arrows move step by step and R resets.

import { replayDelay, stepEnds } from "./model/events.js";

export class Player {
  constructor(onChange) {
    this.onChange = onChange;
    this.events = [];
    this.cursor = 0;
    this.playing = false;
    this.follow = true; // live: show each event as it arrives
    this.speed = 1;
    this._timer = null;
  }

  load(events, { follow = true } = {}) {
    this.pause();
    this.events = events;
    this.follow = follow;
    this.cursor = follow ? events.length : 0;
    this.onChange();
  }

  push(event) {
    this.events.push(event);
    if (this.follow) this.cursor = this.events.length;
    this.onChange();
  }

  seek(cursor) {
    this.cursor = Math.max(0, Math.min(cursor, this.events.length));
    this.follow = this.cursor === this.events.length && !this.playing;
    this.onChange();
  }

  /** Index of the step on screen among all steps of the run. */
  stepIndex() {
    const ends = stepEnds(this.events);
    const index = ends.findIndex((end) => end.end >= this.cursor);
    return index === -1 ? ends.length - 1 : index;
  }

  seekStep(index) {
    const ends = stepEnds(this.events);
    if (ends[index]) this.seek(ends[index].end);
  }

  forward() {
    this.pause();
    const next = stepEnds(this.events).find((end) => end.end > this.cursor);
    this.seek(next ? next.end : this.events.length);
  }

  back() {
    this.pause();
    const earlier = stepEnds(this.events).filter((end) => end.end < this.cursor);
    this.seek(earlier.length ? earlier[earlier.length - 1].end : 0);
  }

  reset() {
    this.pause();
    this.seek(0);
  }

  toggle() {
    if (this.playing) {
      this.pause();
      return;
    }
    if (this.cursor >= this.events.length) this.cursor = 0;
    this.playing = true;
    this.follow = false;
    this._tick();
  }

  pause() {
    this.playing = false;
    clearTimeout(this._timer);
    this.onChange();
  }

  _tick() {
    if (!this.playing) return;
    if (this.cursor >= this.events.length) {
      this.playing = false;
      this.follow = true;
      this.onChange();
      return;
    }
    this.cursor += 1;
    this.onChange();
    this._timer = setTimeout(() => this._tick(), replayDelay(this.events[this.cursor - 1], this.speed));
  }
}
