// The what-if panel (model/whatif.js): the step on screen re-run under another policy or parameters, on a
// socket of its own so the run on screen is never held up; its tree drawn by the main tree's drawing code
// beside the run's step, and the two steps' numbers side by side.

import { Connection, RunFailed } from "../connection.js";
import { layoutTree } from "../model/layout.js";
import { formatNumber } from "../model/format.js";
import {
  FRESH_STATE_NOTE, comparisonRows, foldedStep, stepSummary, whatIfAvailability, whatIfMessage, whatIfTitle,
} from "../model/whatif.js";
import { el } from "./dom.js";
import { describePolicy, fillPolicySelect, markInvalid, readParams, renderParams } from "./forms.js";
import { createTooltip, reasonList, renderTree, resetTree } from "./tree.js";

const $ = (id) => document.getElementById(id);

export class WhatIfPanel {
  /**
   * `events()`: the run on screen; `shownStep()`: the step number on screen (null before the first);
   * `info`: /api/info; `url`: the WebSocket's.
   */
  constructor({ schemas, info, url, events, shownStep }) {
    Object.assign(this, { schemas, info, events, shownStep });
    this.root = $("what-if");
    this.button = $("what-if-open");
    this.form = $("what-if-form");
    this.select = $("what-if-policy");
    this.fieldset = $("what-if-params");
    this.apply = $("what-if-apply");
    this.status = $("what-if-status");
    this.trees = { original: $("what-if-original-tree"), whatIf: $("what-if-tree") };
    this.tooltips = { original: createTooltip($("what-if-original-tooltip")), whatIf: createTooltip($("what-if-tooltip")) };
    this.connection = new Connection(url, (position) =>
      this.setStatus(`waiting for the model: place ${position} in line (a run on screen finishes first)`, "busy"));
    this.result = null; // { step, source: the run's events, events: the what-if's }
    this.filledFor = null; // the run whose policy and parameters the form holds
    this.running = false;
    $("what-if-note").textContent = FRESH_STATE_NOTE;
    this.button.addEventListener("click", (event) => {
      event.currentTarget.blur();
      this.toggle();
    });
    $("what-if-close").addEventListener("click", () => this.toggle(false));
    this.select.addEventListener("change", () => this.fillParams(this.select.value, {}));
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.run();
    });
  }

  get open() {
    return !this.root.hidden;
  }

  toggle(open = !this.open) {
    this.root.hidden = !open;
    this.button.setAttribute("aria-expanded", String(open));
    if (open) {
      this.fillFromRun();
      this.draw();
      this.root.scrollIntoView({ block: "nearest" });
    }
  }

  /** The form starts at the run's own policy and parameters (run_started has them with defaults filled in);
   * another run on screen clears the last what-if, which was of the run before. */
  fillFromRun() {
    const started = this.events().find((e) => e.type === "run_started");
    if (!started || this.filledFor === started.run_id || !(started.policy in this.schemas)) return;
    this.filledFor = started.run_id;
    if (!this.running) {
      this.result = null;
      this.setStatus("");
    }
    fillPolicySelect(this.select, this.schemas, started.policy);
    this.fillParams(started.policy, started.params ?? {});
  }

  fillParams(policy, values) {
    renderParams(this.fieldset, this.schemas[policy], values);
    describePolicy($("what-if-policy-description"), this.schemas[policy]);
  }

  setStatus(text, kind = "") {
    this.status.textContent = text;
    this.status.className = `status ${kind}`;
  }

  /** Called with every draw of the page: what the control offers for the step on screen, and the result. */
  draw() {
    const step = this.shownStep();
    const availability = whatIfAvailability(this.info, this.events(), step);
    // Always there to open: where a step cannot be re-run (no model, no run yet), the panel says why.
    this.button.title = availability.ok
      ? "what if: re-run the step on screen under another policy or parameters, beside the original"
      : availability.reason;
    this.root.dataset.available = String(availability.ok);
    if (!this.open) return;
    this.fillFromRun();
    this.apply.disabled = this.running || !availability.ok;
    this.apply.textContent = step == null ? "Re-run the step" : `Re-run step ${step}`;
    $("what-if-availability").textContent = availability.ok ? availability.note : availability.reason;
    $("what-if-availability").classList.toggle("blocked", !availability.ok);
    this.drawResult();
  }

  async run() {
    const events = this.events();
    const step = this.shownStep();
    const availability = whatIfAvailability(this.info, events, step);
    if (!availability.ok || this.running) return;
    const choice = { policy: this.select.value, params: readParams(this.fieldset) };
    const message = whatIfMessage(events, step, choice, this.info?.drafters ?? null);
    markInvalid(this.root, null);
    this.result = { step, source: events, events: [] };
    resetTree(this.trees.whatIf);
    resetTree(this.trees.original);
    this.running = true;
    this.draw();
    this.setStatus(`re-running step ${step} under ${message.policy}…`, "busy");
    try {
      const finished = await this.connection.start(message, (event) => {
        this.result.events.push(event);
        this.drawResult();
      });
      this.setStatus(`step ${step} re-run: τ ${formatNumber(finished.tau)} (${finished.new_tokens} tokens) ` +
                     `in ${formatNumber(finished.wall_s * 1000, 0)} ms; the run on screen is unchanged`, "done");
    } catch (err) {
      if (err instanceof RunFailed) markInvalid(this.root, err.field);
      const field = err instanceof RunFailed && err.field ? ` in ${err.field}` : "";
      this.setStatus(`error${field}: ${err.message}`, "error");
    } finally {
      this.running = false;
      this.draw();
    }
  }

  /** Both trees and the comparison table, for the step last re-run. */
  drawResult() {
    const result = this.result;
    $("what-if-results").hidden = !result;
    if (!result) return;
    const original = foldedStep(result.source, result.step);
    const whatIf = foldedStep(result.events, result.step);
    const started = result.source.find((e) => e.type === "run_started");
    const whatIfStarted = result.events.find((e) => e.type === "run_started");
    $("what-if-original-title").textContent = `the run · step ${result.step} · ${started?.policy ?? ""}`;
    const changed = whatIfStarted ? whatIfTitle(started, whatIfStarted) : "…";
    $("what-if-title").textContent = `what if · step ${result.step} · ${changed}`;
    const summaries = { original: original && stepSummary(original), whatIf: whatIf && stepSummary(whatIf) };
    for (const side of ["original", "whatIf"]) {
      const step = side === "original" ? original : whatIf;
      const idPrefix = `what-if-${side}-`; // node ids unique on the page, beside the main tree's
      if (step) renderTree(this.trees[side], layoutTree(step, { maxPruned: 1 }), this.tooltips[side], { idPrefix });
      else this.trees[side].replaceChildren();
      $(side === "original" ? "what-if-original-why" : "what-if-why").textContent = whyText(summaries[side]);
    }
    drawTable($("what-if-table"), comparisonRows(summaries.original, summaries.whatIf));
  }
}

/** "60 kept · 450 pruned: 450 below the bar" under each tree. */
function whyText(summary) {
  if (!summary) return "";
  const reasons = Object.keys(summary.reasons).length ? `: ${reasonList(summary.reasons)}` : "";
  return `${summary.kept} kept · ${summary.pruned} pruned${reasons}`;
}

function drawTable(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows.map(([label, original, whatIf, key]) => {
    const differs = original != null && whatIf != null && original !== whatIf;
    const row = el("tr", { "data-key": key, class: differs ? "differs" : "" });
    row.append(el("th", { scope: "row" }, label), cell(original, "original"), cell(whatIf, "what-if"));
    return row;
  }));
}

function cell(value, side) {
  return el("td", { "data-side": side, "data-value": value == null ? "" : String(value) },
            value == null ? "…" : typeof value === "number" ? formatNumber(value, 0) : value);
}
