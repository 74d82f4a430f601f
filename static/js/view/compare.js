// Compare mode: 2–4 panes, each a policy with its parameters, on the same prompt and seed, with ar as
// the baseline. One player moves every pane (one PhasePlayer per pane in a PlayerGroup): the same
// step number, or the step that produced the same output position ("align by tokens emitted").
// Each pane draws its tree, its per-step depth, width and tree size on axes shared by every pane,
// and a strip of every step's silhouette; the table says how each policy did against ar, and under it the
// panes' per-depth acceptance and tokens per step, drawn by /results' own charts.

import {
  alignByTokens, leaderIndex, paneLabels, runFacts, sharedScales, tableRows,
} from "../model/compare.js";
import { formatNumber } from "../model/format.js";
import { layoutTree } from "../model/layout.js";
import { foldPhase, phaseTitle } from "../model/phases.js";
import { baselinePolicy, defaultPanes } from "../model/policies.js";
import { coloursOf } from "../model/results.js";
import { axisTop } from "../model/scale.js";
import { baselineKey } from "../model/setup.js";
import { stepShapeSeries } from "../model/stepshapes.js";
import { sharedNote, stepTimes } from "../model/timesplit.js";
import { PhasePlayer, PlayerGroup, sameStepAndPhase } from "../player.js";
import { silhouetteStrip, stepChart } from "./charts.js";
import { el, svgEl } from "./dom.js";
import { describePolicy, fillPolicySelect, readParams, renderParams } from "./forms.js";
import { acceptLengthChart, acceptanceByDepthChart, chartWidth } from "./results-charts.js";
import { timeSplitChart } from "./timesplit.js";
import { createTooltip, renderTree, resetTree } from "./tree.js";

const MAX_PANES = 4;
const MIN_PANES = 2;
// Where a pane opens: step 1, drawn whole (its verdicts and the emitted token).
const STEP_ONE = { stepIndex: 0, name: "commit", layer: null, walked: 0 };
const $ = (id) => document.getElementById(id);

export const REPLAY_ONLY_REASON = "This server replays recorded runs only: it loaded no model, so nothing can run here. "
  + "Start `specscope serve` without --replay-only to run.";

export class CompareView {
  /**
   * `readSetup()` gives the form's prompt, seed, temperature and max tokens; `setRunning(bool)` tells the
   * page a run holds the connection; `onChange()` is told when panes, alignment or position change (for the URL).
   * `schemas` are the served policies; panes open on the default policy and the other drafting ones.
   */
  constructor({ schemas, defaultPolicy, connection, readSetup, baselines, setRunning, replayOnly = false,
                onChange = () => {} }) {
    Object.assign(this, { schemas, connection, readSetup, baselines, setRunning, replayOnly, onChange });
    this.defaultPanes = defaultPanes(schemas, defaultPolicy, MAX_PANES);
    this.baselinePolicy = baselinePolicy(schemas); // plain decoding, which every pane is measured against
    this.panes = [];
    this.baseline = null; // the baseline's runFacts
    this.recorded = false;
    this.busy = false;
    this.stopped = false;
    this.group = new PlayerGroup([], { onChange: () => this.scheduleDraw(), align: sameStepAndPhase });
    this.bindControls();
    this.addPane();
    this.addPane();
    if (replayOnly) this.markReplayOnly();
  }

  get open() {
    return !$("compare").hidden;
  }

  /** What the URL keeps of compare mode: the panes' policies and parameters, and the alignment. */
  state() {
    return { panes: this.recorded ? [] : this.panes.map((pane) => ({ policy: pane.policy(), params: pane.params() })),
             align: $("compare-align").checked ? "tokens" : "step" };
  }

  /** The leader's position, 1-based step, for the URL. */
  step() {
    const phase = this.group.leader?.phase;
    return phase ? phase.stepIndex + 1 : null;
  }

  // ---------------------------------------------------------------- controls

  bindControls() {
    $("compare-add").addEventListener("click", () => this.addPane());
    $("compare-remove").addEventListener("click", () => this.removePane());
    $("compare-run").addEventListener("click", () => this.run());
    $("compare-stop").addEventListener("click", () => this.stop());
    const press = (id, action) => $(id).addEventListener("click", (event) => {
      event.currentTarget.blur(); // Space then belongs to the player, not to the button that kept focus
      action();
    });
    press("compare-prev-step", () => this.group.prevStep());
    press("compare-prev", () => this.group.prev());
    press("compare-play", () => this.group.toggle());
    press("compare-next", () => this.group.next());
    press("compare-next-step", () => this.group.nextStep());
    $("compare-step").addEventListener("input", (event) => {
      this.group.seekStep(Number(event.target.value) - 1, this.group.leader?.position() ?? STEP_ONE);
    });
    $("compare-align").addEventListener("change", () => this.realign());
    // Compare mode takes the player's keys before the single view sees them.
    window.addEventListener("keydown", (event) => this.onKey(event), true);
    // Charts are drawn at the width they get: a new width redraws them (the step shapes only when it changed).
    window.addEventListener("resize", () => {
      if (this.open) this.scheduleDraw();
    });
  }

  onKey(event) {
    if (!this.open || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest?.("input, textarea, select")) return;
    if (event.target.closest?.("button") && (event.key === " " || event.key === "Enter")) return;
    const group = this.group;
    const actions = {
      " ": () => group.toggle(),
      ArrowRight: () => (event.shiftKey ? group.nextStep() : group.next()),
      ArrowLeft: () => (event.shiftKey ? group.prevStep() : group.prev()),
      Home: () => group.home(),
      End: () => group.end(),
    };
    const action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    event.stopPropagation();
    action();
  }

  markReplayOnly() {
    for (const id of ["compare-run", "compare-add", "compare-remove"]) {
      $(id).disabled = true;
      $(id).title = REPLAY_ONLY_REASON;
    }
    this.setStatus("Replay only: choose a recorded comparison under “Replay a recorded run” (no model is loaded here).", "");
  }

  toggle(open = !this.open) {
    $("compare").hidden = !open;
    document.body.classList.toggle("comparing", open);
    $("compare-toggle").setAttribute("aria-pressed", String(open));
    $("compare-toggle").textContent = open ? "Back to a single run" : "Compare policies";
    this.onChange();
  }

  setBusy(busy) {
    this.busy = busy;
    $("compare-stop").disabled = !busy;
    if (this.replayOnly) return;
    $("compare-run").disabled = busy;
    $("compare-add").disabled = busy || this.panes.length >= MAX_PANES;
    $("compare-remove").disabled = busy || this.panes.length <= MIN_PANES;
  }

  setStatus(text, kind = "") {
    $("compare-status").textContent = text;
    $("compare-status").className = `status ${kind}`;
  }

  // ---------------------------------------------------------------- panes

  addPane(policy = this.defaultPanes[this.panes.length], params = {}) {
    if (this.panes.length >= MAX_PANES) return null;
    const pane = new Pane(this, policy, params, this.panes.length);
    this.panes.push(pane);
    $("panes").append(pane.root);
    this.regroup();
    this.setBusy(this.busy);
    return pane;
  }

  removePane() {
    if (this.panes.length <= MIN_PANES) return;
    this.panes.pop().root.remove();
    this.regroup();
    this.setBusy(this.busy);
    this.renderTable();
  }

  /** Panes from a URL (already checked against the schemas): their policies and parameters, 2–4 of them. */
  setPanes(specs) {
    const wanted = specs.slice(0, MAX_PANES);
    while (this.panes.length < Math.max(MIN_PANES, wanted.length)) this.addPane();
    while (this.panes.length > Math.max(MIN_PANES, wanted.length)) this.removePane();
    wanted.forEach((spec, i) => this.panes[i].setPolicy(spec.policy, spec.params ?? {}));
    this.recorded = false;
  }

  setAlign(align) {
    $("compare-align").checked = align === "tokens";
    this.realign();
  }

  regroup() {
    $("panes").dataset.count = String(this.panes.length);
    this.group.players = this.panes.map((pane) => pane.player);
    this.realign();
  }

  /** The leader is the pane with most steps, so the shared slider reaches every step; the others follow it. */
  realign() {
    const facts = this.panes.map((pane) => pane.facts());
    this.group.leaderIndex = this.panes.length ? leaderIndex(facts) : 0;
    this.group.align = $("compare-align").checked ? alignByTokens : sameStepAndPhase;
    if (!this.busy) this.group.sync();
    this.onChange();
  }

  /** Every pane at step 1, aligned. */
  openAtStepOne() {
    this.group.seekPosition(STEP_ONE);
  }

  // ---------------------------------------------------------------- runs

  stop() {
    this.stopped = true;
    this.connection.cancel();
  }

  /** Runs ar, then every pane, one after another; what was on screen stays until the new run has begun. */
  async run() {
    if (this.replayOnly || this.busy) return;
    const setup = this.readSetup();
    const requests = this.panes.map((pane) => ({ ...setup, policy: pane.policy(), params: pane.params() }));
    revealPanes();
    this.stopped = false;
    this.setRunning(true);
    let cleared = false;
    const clearOnce = () => {
      if (cleared) return;
      cleared = true;
      this.recorded = false;
      this.baseline = null;
      this.panes.forEach((pane) => pane.clear("waiting for its turn"));
      this.renderTable();
    };
    try {
      const arEvents = [];
      this.setStatus(`running ${this.baselinePolicy} (the baseline)…`, "busy");
      const ar = await this.connection.run({ ...setup, policy: this.baselinePolicy, params: {} }, (event) => {
        if (event.type === "run_started") clearOnce(); // a refused request leaves the panes as they were
        arEvents.push(event);
      });
      this.baselines.set(baselineKey(setup), ar);
      this.baseline = runFacts(arEvents);
      for (const [i, request] of requests.entries()) {
        if (this.stopped) break;
        const pane = this.panes[i];
        this.setStatus(`running pane ${i + 1}: ${request.policy}…`, "busy");
        pane.startLive();
        await this.connection.run(request, (event) => pane.player.push(event));
        pane.finishLive();
        this.renderTable();
      }
      this.setStatus(this.stopped ? "stopped" : "done: every pane at step 1; step them together with the arrows", "done");
    } catch (err) {
      this.setStatus(`error${err.field ? ` in ${err.field}` : ""}: ${err.message}`, "error");
    } finally {
      this.setRunning(false);
      this.regroup();
      this.openAtStepOne();
      this.renderTable();
    }
  }

  /** A recorded comparison (a trace with several runs): each run in a pane, ar as the baseline. */
  showRecorded(runs) {
    const finished = runs.filter((run) => run.events.some((e) => e.type === "run_finished"));
    const ar = finished.find((run) => run.policy === this.baselinePolicy) ?? null;
    const others = finished.filter((run) => run !== ar).slice(0, MAX_PANES);
    const shown = others.length ? others : finished.slice(0, MAX_PANES);
    while (this.panes.length < Math.max(MIN_PANES, shown.length)) this.addPane();
    while (this.panes.length > Math.max(MIN_PANES, shown.length)) this.removePane();
    this.baseline = ar ? runFacts(ar.events) : null;
    this.panes.forEach((pane, i) => {
      const run = shown[i];
      if (!run) {
        pane.clear("no run recorded for this pane");
        return;
      }
      pane.setPolicy(run.policy, run.events.find((e) => e.type === "run_started")?.params ?? {});
      pane.loadRecorded(run.events);
    });
    this.recorded = true;
    this.regroup();
    this.openAtStepOne();
    this.renderTable();
    if (!this.open) this.toggle(true);
    revealPanes();
    this.setStatus(`recorded comparison of ${finished.map((run) => run.policy).join(", ")}: the same prompt and seed, `
                   + "run one after another. Every pane opens at step 1; arrows step them together.", "done");
  }

  // ---------------------------------------------------------------- drawing

  scheduleDraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw() {
    const facts = this.panes.map((pane) => pane.facts());
    const shared = sharedScales(facts);
    const scales = { steps: shared.steps, depth: axisTop(shared.depth), width: axisTop(shared.width),
                     size: axisTop(shared.size), maxDepth: shared.depth, maxWidth: shared.width,
                     stepMs: Math.max(1, ...this.panes.flatMap((pane) => stepTimes(pane.player.events).map((t) => t.total))) };
    this.panes.forEach((pane) => pane.draw(scales));
    this.drawStepShapes(facts);
    this.drawPlayer();
    this.onChange();
  }

  drawPlayer() {
    const leader = this.group.leader;
    const phase = leader?.phase;
    const slider = $("compare-step");
    slider.max = String(Math.max(1, leader?.stepCount ?? 1));
    slider.value = String(phase ? phase.stepIndex + 1 : 1);
    slider.disabled = !phase;
    $("compare-play").textContent = this.group.playing ? "❚❚" : "▶";
    $("compare-play").setAttribute("aria-label", this.group.playing ? "pause" : "play");
    $("compare-position").textContent = phase
      ? `${this.panes[this.group.leaderIndex]?.policy() ?? ""} step ${phase.stepIndex + 1} of ${leader.stepCount} · ${phaseTitle(phase)}`
      : "no run yet";
  }

  /**
   * Per-depth acceptance and tokens per step of the panes that draft, once they have steps; redrawn only
   * when a pane's steps or the charts' width changed (not on every move of the player).
   */
  drawStepShapes(facts) {
    const section = $("compare-shapes");
    const box = $("compare-shape-charts");
    const labels = paneLabels(facts.map((f, i) => f.policy ?? this.panes[i].policy()));
    const runs = facts.map((f, i) => ({ ...f, label: labels[i] }));
    const width = chartWidth($("panes").clientWidth);
    // The panes' facts are new objects whenever their events grew (Pane.facts), so identity says "unchanged".
    const drawn = this.shapesDrawn;
    if (drawn && drawn.width === width && drawn.facts.length === facts.length
        && facts.every((f, i) => f === drawn.facts[i] && labels[i] === drawn.labels[i])) return;
    this.shapesDrawn = { width, facts, labels };
    const { byDepth, lengths } = stepShapeSeries(runs, this.schemas);
    section.hidden = !lengths.series.length;
    if (section.hidden) {
      box.replaceChildren();
      return;
    }
    const colours = coloursOf(lengths.series.map((line) => ({ policy: line.label })), null);
    box.replaceChildren(acceptanceByDepthChart(byDepth, colours, { width }),
                        acceptLengthChart(lengths, colours, { width }));
  }

  renderTable() {
    const facts = this.panes.map((pane, i) => ({ ...pane.facts(), label: `${i + 1}: ${pane.policy()}` }))
      .filter((f) => f.finished);
    const all = this.baseline ? [{ ...this.baseline, label: this.baselinePolicy }, ...facts] : facts;
    const body = $("compare-table").querySelector("tbody");
    body.replaceChildren();
    for (const row of tableRows(all, { baseline: this.baselinePolicy })) {
      const tr = el("tr", { "data-policy": row.policy, "data-equality": row.equality.kind });
      const cells = [
        [row.label, "label"], [formatNumber(row.tokensPerS, 1)], [formatNumber(row.tau)], [formatNumber(row.delta)],
        [formatNumber(row.c, 3)], [formatNumber(row.meanTreeSize, 1)], [formatNumber(row.acceptance)],
        [row.predictedR == null ? "–" : `${formatNumber(row.predictedR)}×`, "predicted-r"],
        [row.costAwareR == null ? "–" : `${formatNumber(row.costAwareR)}×`, "cost-aware-r"],
        [row.speedup == null ? "–" : `${formatNumber(row.speedup)}×`, "speedup"],
        [row.equality.text, "equality"],
      ];
      for (const [text, hook] of cells) tr.append(el("td", hook ? { "data-testid": hook, class: hook } : {}, text));
      body.append(tr);
    }
  }
}

class Pane {
  constructor(view, policy, params, index) {
    this.view = view;
    this.schemas = view.schemas;
    this.index = index;
    this.player = new PhasePlayer({ onChange: () => view.scheduleDraw(), policies: view.schemas });
    this.root = el("article", { class: "pane", "data-testid": "compare-pane", "data-pane": String(index + 1) });
    this.build(policy, params);
  }

  build(policy, params) {
    const header = el("header", { class: "pane-header" });
    this.title = el("h3", {}, `${this.index + 1}`);
    this.select = el("select", { "aria-label": `pane ${this.index + 1} policy`, "data-testid": "pane-policy" });
    fillPolicySelect(this.select, this.schemas, policy);
    header.append(this.title, this.select);
    this.description = el("p", { class: "policy-description hint" });
    this.details = el("details", { class: "pane-params" });
    this.details.append(el("summary", {}, "parameters"));
    this.fieldset = el("fieldset", { class: "params" });
    this.fieldset.append(el("legend", {}, "parameters"));
    this.details.append(this.fieldset);
    this.select.addEventListener("change", () => this.setPolicy(this.select.value, {}));
    this.status = el("p", { class: "pane-status" }, this.view.replayOnly ? "choose a recorded comparison" : "not run yet");
    this.position = el("p", { class: "pane-step" });
    const panel = el("div", { class: "tree-panel" });
    const scroll = el("div", { class: "tree-scroll" });
    this.svg = svgEl("svg", { class: "tree", "data-testid": "pane-tree", role: "img", "aria-label": "this pane's tree" });
    scroll.append(this.svg);
    const tip = el("div", { class: "tooltip", hidden: "" });
    panel.append(scroll, tip);
    this.tooltip = createTooltip(tip);
    this.charts = el("div", { class: "pane-charts" });
    this.strip = el("div", { class: "pane-silhouettes" });
    this.timeSplit = el("div", { class: "pane-time-split" });
    this.root.append(header, this.description, this.details, this.status, this.position, panel, this.charts, this.strip,
                     this.timeSplit);
    this.setPolicy(policy, params);
  }

  policy() {
    return this.select.value;
  }

  params() {
    return readParams(this.fieldset);
  }

  setPolicy(policy, params) {
    fillPolicySelect(this.select, this.schemas, policy);
    renderParams(this.fieldset, this.schemas[this.select.value], params);
    describePolicy(this.description, this.schemas[this.select.value]);
    this.root.dataset.policy = this.select.value;
    this.view.onChange();
  }

  /** Its facts (tokens, steps, shapes), recomputed only when its events grew. */
  facts() {
    const events = this.player.events;
    if (this._facts?.count !== events.length) this._facts = { count: events.length, facts: runFacts(events) };
    return this._facts.facts;
  }

  clear(status) {
    this.player.load([], { follow: false });
    this.status.textContent = status;
    this.position.textContent = "";
    this.svg.replaceChildren();
    this.charts.replaceChildren();
    this.strip.replaceChildren();
    this.timeSplit.replaceChildren();
    this.root.dataset.step = "";
  }

  loadRecorded(events) {
    this.player.load(events, { follow: false });
  }

  startLive() {
    this.player.load([], { follow: true });
    this.status.textContent = "running…";
  }

  finishLive() {
    this.player.follow = false;
  }

  draw(scales) {
    const player = this.player;
    const facts = this.facts();
    const phase = player.phase;
    const { step } = foldPhase(player.events, phase);
    if (phase?.step !== this.shownStep) resetTree(this.svg);
    this.shownStep = phase?.step ?? null;
    if (step) {
      renderTree(this.svg, layoutTree(step, { maxPruned: 1 }), this.tooltip);
      magnifyForProjector(this.svg);
    } else this.svg.replaceChildren();
    const stepIndex = phase ? phase.stepIndex : -1;
    this.root.dataset.step = phase ? String(stepIndex + 1) : "";
    this.root.dataset.policy = this.policy();
    const done = facts.finished;
    this.status.textContent = done
      ? `${done.new_tokens} tokens in ${done.steps} steps · τ ${formatNumber(done.tau)} · ${formatNumber(done.tokens_per_s, 1)} tokens/s`
      : player.events.length ? `running: step ${facts.steps.length}…` : this.status.textContent;
    this.position.textContent = phase ? positionText(phase, player, facts) : "";
    if (!facts.steps.length) return;
    const pick = (i) => this.pick(i);
    const series = (key) => facts.steps.map((s) => s[key]);
    // Drawn at the width they get (one to three per row), so their labels keep their size.
    const box = this.charts.clientWidth || 300;
    const columns = Math.max(1, Math.min(3, Math.floor((box + 12) / 232)));
    const common = { steps: scales.steps, current: stepIndex, onPick: pick, width: Math.floor((box - 12 * (columns - 1)) / columns) };
    this.charts.replaceChildren(
      stepChart({ ...common, title: "depth per step", values: series("depth"), yMax: scales.depth, kind: "tree-depth",
                  testid: "pane-depth-chart", yLabel: "depth" }),
      stepChart({ ...common, title: "widest layer per step", values: series("width"), yMax: scales.width,
                  kind: "tree-width", testid: "pane-width-chart", yLabel: "width" }),
      stepChart({ ...common, title: "draft nodes verified per step", values: series("size"), yMax: scales.size,
                  kind: "tree-size", testid: "pane-size-chart", yLabel: "nodes" }),
    );
    this.charts.style.gridTemplateColumns = `repeat(${columns}, minmax(0, 1fr))`;
    const strip = silhouetteStrip(facts.steps, { maxDepth: scales.maxDepth, maxWidth: scales.maxWidth,
                                                 current: stepIndex, onPick: pick });
    this.strip.replaceChildren(el("p", { class: "hint" }, "every step's tree at one scale (darker: accepted depth)"), strip);
    const times = stepTimes(player.events);
    const shared = sharedNote(times); // a batch's runs side by side (a trace from `specscope record --batch`)
    this.timeSplit.replaceChildren(...(shared ? [el("p", { class: "shared-note", "data-testid": "shared-note" }, shared)] : []),
                                   timeSplitChart(times, { current: stepIndex, onPick: pick, steps: scales.steps,
                                                           yMax: scales.stepMs, width: Math.max(300, box), height: 140 }));
  }

  /** A click on this pane's charts: this pane goes to step i, the others follow as aligned. */
  pick(stepIndex) {
    const group = this.view.group;
    const leader = group.leaderIndex;
    group.setLeader(this.index);
    group.seekStep(stepIndex, this.player.position() ?? STEP_ONE);
    group.leaderIndex = leader;
  }
}

/** Where the form comes first (one column, ≤ 1100 px), a comparison brings its player and panes into view. */
function revealPanes() {
  const box = $("compare-player").getBoundingClientRect();
  if (!box.height || (box.top >= 0 && box.top < innerHeight * 0.5)) return;
  $("compare").scrollIntoView({ block: "start", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
}

// On a projector (presentation mode) a pane's tree is drawn 1.6 times its size: its 15 px labels at 24 px.
const PROJECTOR_TREE_SCALE = 1.6;

function magnifyForProjector(svg) {
  if (!document.body.classList.contains("presenting")) return;
  for (const side of ["width", "height"]) svg.setAttribute(side, String(Number(svg.getAttribute(side)) * PROJECTOR_TREE_SCALE));
}

function positionText(phase, player, facts) {
  const first = player.emittedBefore(phase.stepIndex);
  const emitted = facts.steps[phase.stepIndex]?.emitted ?? 0;
  const tokens = emitted ? ` · output tokens ${first + 1}–${first + emitted}` : "";
  return `step ${phase.stepIndex + 1} of ${player.stepCount} · ${phaseTitle(phase)}${tokens}`;
}
