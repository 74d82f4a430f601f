// Compare mode: 2–4 panes, each its own policy and parameters, run one after another
// on the same prompt and seed after an `ar` baseline, ending in a table.

import { compareRows } from "../model/compare.js";
import { foldEvents, runSummary } from "../model/events.js";
import { formatNumber } from "../model/format.js";
import { layoutTree } from "../model/layout.js";
import { baselineKey } from "../model/setup.js";
import { barChart } from "./charts.js";
import { el } from "./dom.js";
import { fillPolicySelect, readParams, renderParams } from "./forms.js";
import { renderTree } from "./tree.js";

const DEFAULT_PANES = ["talon", "eagle", "chain", "talon"];
const $ = (id) => document.getElementById(id);

export class CompareView {
  constructor({ schemas, connection, readSetup, baselines, setRunning }) {
    Object.assign(this, { schemas, connection, readSetup, baselines, setRunning });
    this.panes = [];
    this.stopped = false;
    this.busy = false;
    $("compare-add").addEventListener("click", () => this.addPane());
    $("compare-remove").addEventListener("click", () => this.removePane());
    $("compare-run").addEventListener("click", () => this.run());
    $("compare-stop").addEventListener("click", () => this.stop());
    this.addPane();
    this.addPane();
  }

  toggle() {
    const open = $("compare").hidden;
    $("compare").hidden = !open;
    document.body.classList.toggle("comparing", open);
    $("compare-toggle").setAttribute("aria-pressed", String(open));
    $("compare-toggle").textContent = open ? "Back to a single run" : "Compare policies";
  }

  setBusy(busy) {
    this.busy = busy;
    $("compare-run").disabled = busy;
    $("compare-add").disabled = busy || this.panes.length >= 4;
    $("compare-remove").disabled = busy || this.panes.length <= 2;
  }

  addPane() {
    if (this.panes.length >= 4) return;
    const pane = new Pane(this.schemas, DEFAULT_PANES[this.panes.length], this.panes.length);
    this.panes.push(pane);
    $("panes").append(pane.root);
    this.setBusy(this.busy);
  }

  removePane() {
    if (this.panes.length <= 2) return;
    this.panes.pop().root.remove();
    this.setBusy(this.busy);
  }

  stop() {
    this.stopped = true;
    this.connection.cancel();
  }

  async run() {
    const setup = this.readSetup();
    const requests = this.panes.map((pane) => ({ ...setup, policy: pane.policy(), params: pane.params() }));
    this.stopped = false;
    this.setRunning(true);
    $("compare-table").querySelector("tbody").replaceChildren();
    this.panes.forEach((pane) => pane.clear());
    try {
      const ar = await this.runOne({ ...setup, policy: "ar", params: {} }, null, "ar (baseline)");
      this.baselines.set(baselineKey(setup), ar);
      const results = [];
      for (const [i, request] of requests.entries()) {
        if (this.stopped) break;
        const finished = await this.runOne(request, this.panes[i], `pane ${i + 1}: ${request.policy}`);
        results.push({ label: `${i + 1}: ${request.policy}`, finished });
      }
      this.renderTable([{ label: "ar", finished: ar }, ...results], ar);
      setCompareStatus(this.stopped ? "stopped" : "done: see the table below", "done");
    } catch (err) {
      setCompareStatus(`error${err.field ? ` in ${err.field}` : ""}: ${err.message}`, "error");
    } finally {
      this.setRunning(false);
    }
  }

  async runOne(request, pane, label) {
    setCompareStatus(`running ${label}…`, "busy");
    const events = [];
    return this.connection.run(request, (event) => {
      events.push(event);
      pane?.show(events);
    });
  }

  /** A recorded comparison (a trace with several runs): each run in a pane, `ar` as the baseline. */
  showRecorded(runs) {
    const finishedOf = (run) => run.events.find((e) => e.type === "run_finished");
    const ar = runs.find((run) => run.policy === "ar" && finishedOf(run));
    const others = runs.filter((run) => run !== ar && finishedOf(run)).slice(0, 4);
    while (this.panes.length < Math.max(2, others.length)) this.addPane();
    while (this.panes.length > Math.max(2, others.length)) this.removePane();
    this.panes.forEach((pane, i) => {
      pane.clear();
      if (!others[i]) return;
      pane.setPolicy(others[i].policy, others[i].events.find((e) => e.type === "run_started")?.params ?? {});
      pane.show(others[i].events);
    });
    const results = others.map((run, i) => ({ label: `${i + 1}: ${run.policy}`, finished: finishedOf(run) }));
    const baseline = ar ? finishedOf(ar) : null;
    this.renderTable(baseline ? [{ label: "ar", finished: baseline }, ...results] : results, baseline);
    if (!document.body.classList.contains("comparing")) this.toggle();
    setCompareStatus("recorded comparison: the same prompt and seed, run one after another", "done");
  }

  renderTable(results, ar) {
    const body = $("compare-table").querySelector("tbody");
    body.replaceChildren();
    for (const row of compareRows(results, ar)) {
      const tr = el("tr");
      const identical = row.identical == null ? "–" : row.identical ? "yes" : "no";
      for (const value of [row.label, formatNumber(row.tokensPerS, 1), formatNumber(row.tau), formatNumber(row.delta),
                           String(row.steps), row.speedup == null ? "–" : `${formatNumber(row.speedup)}×`, identical]) {
        tr.append(el("td", {}, value));
      }
      tr.lastChild.className = row.identical === false ? "differs" : "";
      body.append(tr);
    }
  }
}

function setCompareStatus(text, kind) {
  $("compare-status").textContent = text;
  $("compare-status").className = `status ${kind}`;
}

class Pane {
  constructor(schemas, policy, index) {
    this.schemas = schemas;
    this.root = el("article", { class: "pane", "data-pane": String(index + 1) });
    const header = el("header");
    this.select = el("select", { "aria-label": `pane ${index + 1} policy`, "data-testid": "pane-policy" });
    fillPolicySelect(this.select, schemas, policy);
    this.fieldset = el("fieldset", { class: "params" });
    this.fieldset.append(el("legend", {}, "parameters"));
    renderParams(this.fieldset, schemas[this.select.value]);
    this.select.addEventListener("change", () => renderParams(this.fieldset, schemas[this.select.value]));
    header.append(el("h3", {}, `Pane ${index + 1}`), this.select);
    this.status = el("p", { class: "pane-status" }, "not run yet");
    const scroll = el("div", { class: "tree-scroll" });
    this.svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    this.svg.setAttribute("class", "tree");
    this.svg.setAttribute("data-testid", "pane-tree");
    scroll.append(this.svg);
    this.charts = el("div", { class: "pane-charts" });
    this.stepLabel = el("p", { class: "pane-step" });
    this.root.append(header, this.fieldset, this.status, this.stepLabel, scroll, this.charts);
  }

  policy() {
    return this.select.value;
  }

  setPolicy(policy, params) {
    this.select.value = policy;
    renderParams(this.fieldset, this.schemas[policy], params);
  }

  params() {
    return readParams(this.fieldset);
  }

  clear() {
    this.picked = null;
    this.stepLabel.textContent = "";
    this.svg.replaceChildren();
    this.charts.replaceChildren();
    this.status.textContent = "waiting for its turn";
  }

  /** Redraws at most once a frame, however fast events arrive. */
  show(events) {
    this.events = events;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw(this.events);
    });
  }

  /** Once the run is over, a click on a bar shows that step's tree instead of the last one. */
  pick(index) {
    this.picked = index;
    this.draw(this.events);
  }

  draw(events) {
    const run = foldEvents(events);
    const last = run.steps.length - 1;
    const index = run.finished && this.picked != null ? Math.min(this.picked, last) : last;
    const step = run.steps[index];
    if (step) renderTree(this.svg, layoutTree(step, { maxPruned: 1 }), null);
    this.stepLabel.textContent = step ? `tree of step ${index + 1} of ${run.steps.length}` : "";
    const summary = runSummary(run);
    this.status.textContent = run.finished
      ? `${run.finished.new_tokens} tokens · τ ${formatNumber(summary.tau)} · ${formatNumber(run.finished.tokens_per_s, 1)} tokens/s`
      : `step ${step?.step ?? 0}…`;
    this.charts.replaceChildren(
      barChart("depth per step", summary.series.depth, "tree-depth", { width: 160, height: 36, onPick: (i) => this.pick(i) }),
      barChart("width per step", summary.series.width, "tree-width", { width: 160, height: 36, onPick: (i) => this.pick(i) }),
    );
  }
}
