// Page wiring of /: form, live run, replay, the lecture player and its keys. State lives in model/
// folds and the PhasePlayer; drawing in view/.

import { Connection, RunFailed } from "./connection.js";
import { foldEvents, parseTrace, runSummary, splitRuns } from "./model/events.js";
import { boundsOf, collapsibleCount, layoutTree } from "./model/layout.js";
import { narrate, prefixLength } from "./model/narration.js";
import { foldPhase, parsePosition, phaseKey, stepEvent } from "./model/phases.js";
import { isBaseline, presentationOf } from "./model/policies.js";
import { baselineKey, checkSetup, decodeLink, encodeCompare, encodeLink, encodeView, setupRules } from "./model/setup.js";
import { formulaNumbers, kvCache, verifiedTree, walkStep } from "./model/theory.js";
import { stepTimes } from "./model/timesplit.js";
import { PhasePlayer } from "./player.js";
import { renderCaption } from "./view/caption.js";
import { CompareView, REPLAY_ONLY_REASON } from "./view/compare.js";
import { el } from "./view/dom.js";
import { composeSvg, download, svgToPng, traceText as eventsText } from "./view/export.js";
import { applyRequestRules, describePolicy, fillPolicySelect, markInvalid, readParams, renderParams } from "./view/forms.js";
import { Presentation } from "./view/presentation.js";
import { renderEngineNotes, renderMetrics, renderOutput, renderTimeSplit, renderTimeline } from "./view/run.js";
import { renderFormulas, renderKv, renderMask, renderSampling, scaleDrawings } from "./view/theory.js";
import { TreeView, createTooltip } from "./view/tree.js";
import { WhatIfPanel } from "./view/whatif.js";

const $ = (id) => document.getElementById(id);

// Zoom limits: labels are 15 px at zoom 1; never drawn under 14 px on screen, 24 px on a projector.
const ZOOM = { screen: { minZoom: 0.94, homeZoom: 1.05, maxZoom: 1.5 },
               projector: { minZoom: 1.61, homeZoom: 1.7, maxZoom: 2.2 } };
// A layer whose folded candidates are this few opens by itself while it is the one drafted.
const OPEN_BY_ITSELF = 12;
const PANEL_OF_PHASE = { draft: "formulas", rerank: "formulas", verify: "mask", accept: "sampling", commit: "kv" };
// The theory tabs in order: keys 1–5 pick one, T the next (on a projector the tabs cannot be clicked from the lectern).
const THEORY_VIEWS = ["auto", "mask", "kv", "sampling", "formulas"];

const page = {
  schemas: {}, // the served policies (/api/policies): parameters and presentation
  rules: null, // the form's bounds and defaults (model/setup.js setupRules, from /api/request and /api/info)
  baselines: new Map(), // baselineKey -> ar run_finished, for speedups
  request: null, // the request behind what is on screen
  connection: new Connection(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`,
                             (position) => showQueued(position)),
  tooltip: createTooltip($("tooltip")),
  trace: null, // { name, runs, runIndex } when replaying a recorded trace
  traces: [], // the shipped traces, as /api/traces lists them
  arEvents: null, // plain decoding of the same setup, when the trace has it
  view: "auto", // the theory panel: auto follows the phase
  expandedLayers: new Set(),
  expandedParents: new Set(),
  shownStep: null,
  focusKey: null,
  hovered: null, // tree index (post) of the node hovered in the tree or the mask
};
page.player = new PhasePlayer({ onChange: scheduleDraw });
page.tree = new TreeView($("tree-viewport"), {
  tooltip: page.tooltip,
  onHover: (id) => hoverNode(id),
  onLayer: (depth) => toggle(page.expandedLayers, depth),
  onChip: (parent) => toggle(page.expandedParents, parent),
});
page.presentation = new Presentation({
  button: $("presentation-toggle"),
  onChange: () => {
    page.focusKey = null; // the camera re-frames for the new size
    scheduleDraw();
    page.compare?.scheduleDraw();
  },
});

function toggle(set, value) {
  if (set.has(value)) set.delete(value);
  else set.add(value);
  scheduleDraw();
}

function setStatus(text, kind = "") {
  $("status").textContent = text;
  $("status").className = `status ${kind}`;
}

// Other clients' runs go first; both views say where this one stands.
function showQueued(position) {
  const text = `waiting for the model: place ${position} in line`;
  setStatus(text, "busy");
  $("compare-status").textContent = text;
}

// ---------------------------------------------------------------- drawing

let drawPending = false;

function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  // Tests (and anyone scripting the page) wait for "drawn" before reading what is on screen.
  document.body.dataset.draw = "pending";
  requestAnimationFrame(() => {
    drawPending = false;
    draw();
    document.body.dataset.draw = "drawn";
  });
}

function draw() {
  const { player } = page;
  const phase = player.phase;
  const events = player.events;
  const state = foldPhase(events, phase);
  const whole = foldEvents(events);
  drawPlayer(phase);
  drawTree(phase, state.step);
  renderCaption($("caption"), narrate(events, phase, state));
  drawTheory(phase, state);
  renderTimeline($("step-timeline"), whole, phase?.stepIndex ?? -1, (i) => player.seekStep(i));
  renderOutput($("output"), state.run, presentationOf(page.schemas, state.run.policy).drafts);
  $("output").dataset.finished = String(Boolean(state.run.finished));
  renderMetrics($("metrics"), runSummary(state.run), speedupOf(state.run), (i) => player.seekStep(i));
  renderTimeSplit($("time-split-box"), stepTimes(events), { current: phase?.stepIndex ?? -1, onPick: (i) => player.seekStep(i) });
  page.whatIf?.draw();
  saveView();
}

function drawPlayer(phase) {
  const { player } = page;
  $("play").textContent = player.playing ? "❚❚" : "▶";
  $("play").setAttribute("aria-label", player.playing ? "pause" : "play");
  $("phase-name").textContent = phase?.name ?? "";
  $("phase-step").textContent = phase ? `step ${phase.stepIndex + 1} of ${player.stepCount}` : "no run yet";
  const detail = !phase ? "" : phase.name === "draft" ? `layer ${phase.layer}`
    : phase.name === "accept" ? `node ${phase.walked} of ${phase.walkLength}` : "";
  $("phase-detail").textContent = detail;
  document.querySelector(".stage-phase").textContent = phase ? `step ${phase.stepIndex + 1} · ${phase.name} ${detail}` : "";
  $("phase-prev").disabled = !phase || phase.index === 0;
  $("phase-next").disabled = !phase || player.atEnd;
  $("play").disabled = !player.phases.length;
}

function drawTree(phase, step) {
  if (!step) {
    page.tree.render({ nodes: [], chips: [], edges: [], layers: [], width: 0, height: 0 });
    return;
  }
  if (step.step !== page.shownStep) {
    page.shownStep = step.step;
    page.expandedLayers.clear();
    page.expandedParents.clear();
  }
  const open = new Set(page.expandedLayers);
  if (phase.name === "draft" && collapsibleCount(step, phase.layer) <= OPEN_BY_ITSELF) open.add(phase.layer);
  const layout = layoutTree(step, { expandedLayers: open, expandedParents: page.expandedParents });
  const key = `${step.step}:${phaseKey(phase)}:${page.presentation.active}`;
  const focus = key === page.focusKey ? null : focusOf(layout, phase, step);
  page.focusKey = key;
  page.layout = layout;
  page.tree.render(layout, { focus, ...(page.presentation.active ? ZOOM.projector : ZOOM.screen) });
}

/** What the camera should frame for a phase: the layer being drafted, the whole tree, or the accepted path. */
function focusOf(layout, phase, step) {
  const focus = pickFocus(layout, phase, step);
  // The layer headers (titles, thresholds, folded counts) stay in view above whatever is framed.
  if (focus.box && focus.box.y < 300) focus.box = { ...focus.box, h: focus.box.h + focus.box.y, y: 0 };
  return focus;
}

function pickFocus(layout, phase, step) {
  const byId = new Map(layout.nodes.map((n) => [n.id, n]));
  const root = byId.get("n0");
  if (phase.name === "draft") {
    const layer = layout.nodes.filter((n) => n.depth === phase.layer || n.depth === phase.layer - 1);
    return { box: boundsOf([root, ...layer]), anchor: "start" };
  }
  if (phase.name === "rerank" || phase.name === "verify") return { box: boundsOf(layout.nodes), anchor: "start" };
  const path = step.acceptedPath.map((id) => byId.get(id)).filter(Boolean);
  const emitted = byId.get("emitted");
  const walked = (step.walk ?? []).slice(0, phase.walked).map((id) => byId.get(id)).filter(Boolean);
  return { box: boundsOf([root, ...path, ...walked, ...(emitted ? [emitted] : [])]), anchor: "end" };
}

function hoverNode(id) {
  const node = id ? page.layout?.nodes.find((n) => n.id === id) : null;
  page.hovered = node?.post ?? null;
  drawMask();
}

// ---------------------------------------------------------------- theory

function drawTheory(phase, state) {
  const shown = page.view === "auto" ? PANEL_OF_PHASE[phase?.name] ?? "formulas" : page.view;
  for (const tab of document.querySelectorAll("#theory [role=tab]")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === page.view));
    tab.classList.toggle("showing", tab.dataset.view === shown);
  }
  for (const panel of document.querySelectorAll("#theory .panel")) panel.hidden = panel.dataset.panel !== shown;
  page.theory = { phase, state };
  drawMask();
  if (!phase || !state.step) {
    for (const id of ["kv-panel", "sampling-panel", "formula-panel"]) $(id).replaceChildren();
    return;
  }
  const events = page.player.events;
  const prefix = prefixLength(events, phase);
  const width = panelWidth();
  const decided = phase.name === "verify" || phase.name === "accept" || phase.name === "commit";
  if (decided) {
    const acceptedSoFar = new Set([0, ...[...state.step.nodes.values()].filter((n) => n.status === "accepted").map((n) => n.post)]);
    renderKv($("kv-panel"), kvCache(events, phase, prefix), { committed: phase.name === "commit", accepted: acceptedSoFar, width });
  }
  else $("kv-panel").replaceChildren(el("p", { class: "panel-note" }, `The cache holds ${prefix} rows (the prompt but its last token, and every token emitted so far). Verify will append one row per tree node.`));
  const verify = decided ? stepEvent(events, phase, "verify") : null;
  const walk = verify && phase.name !== "verify" ? walkStep(verify, phase.walked, verifiedTree(events, phase).parent) : null;
  const started = events.find((e) => e.type === "run_started") ?? {};
  renderSampling($("sampling-panel"), walk, {
    temperature: started.temperature ?? 0,
    nodeText: walk ? textAtPost(state.step, walk.node) : "",
    textOf: (check) => textAtPost(state.step, check.child),
    plain: !presentationOf(page.schemas, started.policy).drafts,
  });
  const ar = page.arEvents;
  const arFinished = ar?.find((e) => e.type === "run_finished") ?? (page.request ? page.baselines.get(baselineKey(page.request)) : null);
  renderFormulas($("formula-panel"), formulaNumbers(events, phase, { arFinished, arEvents: ar, policies: page.schemas }),
                 { drafts: presentationOf(page.schemas, started.policy).drafts });
  for (const id of ["kv-panel", "sampling-panel"]) scaleDrawings($(id), drawingScale());
}

function drawMask() {
  const { phase } = page.theory ?? {};
  if (!phase || !page.player.events.length) {
    $("mask-panel").replaceChildren();
    return;
  }
  const events = page.player.events;
  if (phase.name === "draft") {
    $("mask-panel").replaceChildren(el("p", { class: "panel-note" },
      "The mask is built once the tree is final: at verify, each drafted token attends to the prefix, its ancestors and itself."));
    delete $("mask-panel").dataset.rows;
    return;
  }
  const tree = verifiedTree(events, phase);
  renderMask($("mask-panel"), tree, prefixLength(events, phase), {
    width: panelWidth(), height: 560, hovered: page.hovered, labelAll: page.presentation.active,
    onHover: (row) => {
      page.hovered = row;
      page.tree.highlight(page.theory.state.step?.postToId[row] ?? null);
      drawMask();
    },
  });
  scaleDrawings($("mask-panel"), drawingScale());
}

// On a projector the theory panel's drawings are drawn larger (their 14 px text at 24 px), and laid
// out for the width that leaves.
function drawingScale() {
  return page.presentation.active ? 24 / 14 : 1;
}

function panelWidth() {
  return Math.max(320, Math.min(760, ($("theory").clientWidth - 24) / drawingScale()));
}

function textAtPost(step, post) {
  const id = step.postToId?.[post] ?? (post === 0 ? "n0" : null);
  return step.nodes.get(id)?.text ?? "";
}

function speedupOf(run) {
  if (!run.finished) return null;
  if (isBaseline(page.schemas, run.policy)) return 1;
  const ar = page.arEvents?.find((e) => e.type === "run_finished")
    ?? (page.request ? page.baselines.get(baselineKey(page.request)) : null);
  return ar && ar.tokens_per_s > 0 ? run.finished.tokens_per_s / ar.tokens_per_s : null;
}

// ---------------------------------------------------------------- URL

/** The URL holds what a link must reopen: the trace (or the setup) and where the class stopped. */
function saveView() {
  const compare = page.compare?.open ? page.compare : null;
  // A live comparison replaces the trace on screen: its link is the setup and the panes.
  const trace = compare && !compare.recorded ? null : page.trace;
  const query = trace ? new URLSearchParams() : new URLSearchParams(location.search);
  const phase = page.player.phase;
  const at = trace && phase && !compare;
  encodeView({
    trace: trace?.name,
    run: trace && trace.runIndex && !compare ? trace.runIndex : null,
    step: at ? phase.stepIndex + 1 : compare && trace ? compare.step() : null,
    phase: at ? phaseKey(phase) : null,
    view: page.view === "auto" ? null : page.view,
    present: page.presentation.active,
  }, query);
  encodeCompare(compare ? compare.state() : null, query);
  const search = query.toString() ? `?${query}` : "";
  // A long setup lives in the fragment (model/setup.js); it stays as long as the setup is what is shown.
  const url = `${location.pathname}${search}${trace ? "" : location.hash}`;
  if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, "", url);
}

// ---------------------------------------------------------------- form

function readSetup() {
  return {
    prompt: $("prompt").value,
    policy: $("policy").value,
    params: readParams($("params")),
    temperature: Number($("temperature").value),
    seed: Number($("seed").value),
    max_new_tokens: Number($("max-new-tokens").value),
  };
}

function applySetup(setup) {
  if (setup.prompt != null) $("prompt").value = setup.prompt;
  if (setup.temperature != null) $("temperature").value = setup.temperature;
  if (setup.seed != null) $("seed").value = setup.seed;
  if (setup.max_new_tokens != null) $("max-new-tokens").value = setup.max_new_tokens;
  fillPolicySelect($("policy"), page.schemas, setup.policy ?? page.rules.defaults.policy);
  renderParams($("params"), page.schemas[$("policy").value], setup.params ?? {});
  describePolicy($("policy-description"), page.schemas[$("policy").value]);
}

/**
 * A link to what is on screen: the trace and position when replaying (never dropped), else the setup,
 * packed into the fragment when it is long (model/setup.js), with compare mode and its panes.
 */
async function shareLink() {
  const compare = page.compare?.open ? page.compare : null;
  if (page.trace && !(compare && !compare.recorded)) return location.href;
  const link = await encodeLink({ setup: readSetup(), view: { present: page.presentation.active },
                                  compare: compare ? compare.state() : null });
  return `${location.origin}${location.pathname}${link}`;
}

async function showSetupInUrl(setup) {
  const link = await encodeLink({ setup, view: { present: page.presentation.active } });
  history.replaceState(null, "", `${location.pathname}${link}`);
}

// ---------------------------------------------------------------- running

function setRunning(running) {
  $("run").disabled = running;
  $("stop").disabled = !running;
  page.compare?.setBusy(running);
}

async function runSingle(event) {
  event.preventDefault();
  // The keys belong to the player once a run starts, not to the Run button that kept focus.
  document.activeElement?.blur();
  const request = readSetup();
  page.trace = null;
  page.arEvents = null;
  $("trace").value = "";
  showSetupInUrl(request).catch(() => {});
  markInvalid(document, null);
  page.request = request;
  page.player.load([], { follow: true });
  revealTree();
  setRunning(true);
  setStatus(`running ${request.policy}…`, "busy");
  try {
    const finished = await page.connection.run(request, (e) => {
      page.player.push(e);
      if (e.type === "verify") setStatus(`running ${request.policy}: step ${e.step}`, "busy");
    });
    if (isBaseline(page.schemas, finished.policy)) page.baselines.set(baselineKey(request), finished);
    setStatus(`finished: ${finished.new_tokens} tokens in ${finished.steps} steps (${finished.stop_reason}); ` +
              "← → walk through it phase by phase", "done");
  } catch (err) {
    reportError(err);
  } finally {
    setRunning(false);
    scheduleDraw();
  }
}

function reportError(err) {
  if (err instanceof RunFailed) {
    markInvalid(document, err.field);
    setStatus(`error${err.field ? ` in ${err.field}` : ""}: ${err.message}`, "error");
  } else {
    setStatus(`error: ${err.message}`, "error");
  }
}

/** Where the form comes first (one column, ≤ 1100 px), a run brings the tree into view to be seen growing. */
function revealTree() {
  const box = $("tree-viewport").getBoundingClientRect();
  if (box.top >= 0 && box.top < innerHeight * 0.5) return;
  $("single").scrollIntoView({ block: "start", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
}

// ---------------------------------------------------------------- replay

async function loadTraceList() {
  const traces = await (await fetch("/api/traces")).json();
  page.traces = traces;
  for (const trace of traces) {
    const policies = trace.policies?.join(", ") ?? trace.policy ?? "";
    const temperature = trace.temperature == null ? "" : ` · T ${trace.temperature}`;
    const option = el("option", { value: trace.url, "data-name": trace.name }, `${trace.title ?? trace.name} — ${policies}${temperature}`);
    $("trace").append(option);
  }
  return traces;
}

/** A trace's text: JSON lines, inflated first where the file is gzip-compressed (NAME.jsonl.gz). */
async function traceText(response) {
  const bytes = new Uint8Array(await response.arrayBuffer());
  if (bytes[0] !== 0x1f || bytes[1] !== 0x8b) return new TextDecoder().decode(bytes);
  const inflated = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(inflated).text();
}

/** A trace the server does not have: the status line says so and lists the shipped ones. */
function unknownTrace(name) {
  const names = page.traces.map((trace) => trace.name).join(", ") || "none";
  setStatus(`There is no trace named "${name}". The shipped traces are: ${names}. ` +
            "Choose one under “Replay a recorded run”.", "error");
  if (page.compare?.open) page.compare.setStatus($("status").textContent, "error");
  $("trace").value = "";
}

async function loadTrace(name, { at = null, runIndex = 0 } = {}) {
  const listed = page.traces.find((trace) => trace.name === name);
  const url = listed?.url ?? `/static/traces/${encodeURIComponent(name)}.jsonl`;
  const response = await fetch(url);
  if (response.status === 404) {
    unknownTrace(name);
    return null;
  }
  if (!response.ok) throw new Error(`cannot load the trace ${name}: ${response.status}`);
  const runs = splitRuns(parseTrace(await traceText(response)));
  const index = Math.min(Math.max(0, runIndex), runs.length - 1);
  page.trace = { name, runs, runIndex: index };
  const picker = $("trace-run");
  picker.replaceChildren(...runs.map((run, i) => el("option", { value: String(i) }, `${run.policy} · ${run.runId}`)));
  picker.value = String(index);
  picker.hidden = runs.length < 2;
  picker.onchange = () => {
    page.trace.runIndex = Number(picker.value);
    showRecorded(runs[page.trace.runIndex], { at: page.player.position() });
    picker.blur();
  };
  $("trace-compare").hidden = runs.length < 2;
  $("trace-compare").onclick = () => page.compare.showRecorded(runs);
  page.arEvents = runs.find((run) => isBaseline(page.schemas, run.policy))?.events ?? null;
  showRecorded(runs[index], { at });
  return runs;
}

function showRecorded(recorded, { at = null } = {}) {
  const started = recorded.events.find((e) => e.type === "run_started");
  page.request = started ? { prompt: started.prompt, seed: started.seed, temperature: started.temperature,
                             top_k: started.top_k, top_p: started.top_p, max_new_tokens: started.max_new_tokens } : null;
  // The form takes the recorded setup, so a lecturer can re-run it live where a model is loaded.
  if (started) applySetup({ ...page.request, policy: started.policy, params: started.params });
  page.focusKey = null;
  page.player.load(recorded.events, { follow: false, at });
  revealTree();
  setStatus(`replaying ${recorded.policy}: → and ← move one phase, Shift+→ and Shift+← one step, Space plays`, "done");
}

// ---------------------------------------------------------------- keys

function onKey(event) {
  if (event.target.closest("input, textarea, select") && event.key !== "Escape") return;
  if (event.target.closest("button") && (event.key === " " || event.key === "Enter")) return;
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const { player, tree } = page;
  const actions = {
    " ": () => player.toggle(),
    ArrowRight: () => (event.shiftKey ? player.nextStep() : player.next()),
    ArrowLeft: () => (event.shiftKey ? player.prevStep() : player.prev()),
    Home: () => player.home(),
    End: () => player.end(),
    p: () => page.presentation.toggle(),
    P: () => page.presentation.toggle(),
    Escape: () => {
      page.tooltip.unpin();
      page.presentation.leave();
    },
    "+": () => tree.zoomBy(1.25),
    "=": () => tree.zoomBy(1.25),
    "-": () => tree.zoomBy(0.8),
    "0": () => tree.fitAll(),
    f: () => refocus(),
    F: () => refocus(),
    t: () => showTheory(nextTheory()),
    T: () => showTheory(nextTheory()),
    ...Object.fromEntries(THEORY_VIEWS.map((view, i) => [String(i + 1), () => showTheory(view)])),
  };
  const action = actions[event.key];
  if (action) {
    event.preventDefault();
    action();
  }
}

function nextTheory() {
  return THEORY_VIEWS[(THEORY_VIEWS.indexOf(page.view) + 1) % THEORY_VIEWS.length];
}

function showTheory(view) {
  page.view = view;
  scheduleDraw();
}

function refocus() {
  page.focusKey = null;
  scheduleDraw();
}

function wireButtons() {
  const { player } = page;
  const click = (id, action) => $(id).addEventListener("click", (e) => {
    e.currentTarget.blur();
    action(e);
  });
  click("play", () => player.toggle());
  click("phase-prev", (e) => (e.shiftKey ? player.prevStep() : player.prev()));
  click("phase-next", (e) => (e.shiftKey ? player.nextStep() : player.next()));
  click("presentation-toggle", () => page.presentation.toggle());
  click("export-svg", () => download(`${exportName()}.svg`, currentSvg(), "image/svg+xml"));
  click("export-png", async () => download(`${exportName()}.png`, await svgToPng(currentSvg()), "image/png"));
  click("export-trace", () => download(`${exportName()}.jsonl`, eventsText(player.events), "application/x-ndjson"));
  for (const button of document.querySelectorAll(".zoom-controls button")) {
    button.addEventListener("click", (e) => {
      e.stopPropagation();
      const zoom = button.dataset.zoom;
      if (zoom === "in") page.tree.zoomBy(1.25);
      else if (zoom === "out") page.tree.zoomBy(0.8);
      else if (zoom === "fit") page.tree.fitAll();
      else refocus();
    });
  }
  for (const tab of document.querySelectorAll("#theory [role=tab]")) {
    tab.addEventListener("click", () => showTheory(tab.dataset.view));
  }
  $("speed").addEventListener("change", (e) => { player.speed = Number(e.target.value); });
  $("step-timeline").querySelector("input[type=range]")
    .addEventListener("input", (e) => player.seekStep(Number(e.target.value)));
}

function currentSvg() {
  const shown = document.querySelector("#theory .panel:not([hidden])");
  return composeSvg({ tree: page.tree, panel: shown, caption: {
    title: $("caption-title").textContent, text: $("caption-text").textContent } });
}

function exportName() {
  const phase = page.player.phase;
  const base = page.trace?.name ?? page.player.events[0]?.policy ?? "specscope";
  return phase ? `${base}-step${phase.stepIndex + 1}-${phaseKey(phase)}` : base;
}

// ---------------------------------------------------------------- start

async function start() {
  const [schemas, request, info] = await Promise.all(["/api/policies", "/api/request", "/api/info"].map(
    (url) => fetch(url).then((r) => r.json())));
  page.schemas = schemas;
  page.player.policies = schemas;
  page.rules = setupRules(request, info.default_policy);
  applyRequestRules(document, page.rules);
  renderEngineNotes($("engine-notes"), info);
  const link = await decodeLink(location.search, location.hash);
  const view = link.view;
  // What a link asks for is checked; whatever is replaced by a default is said in the status line.
  const { setup, problems } = checkSetup(link.setup, page.schemas, page.rules);
  applySetup(setup);
  if (THEORY_VIEWS.includes(view.view)) page.view = view.view;
  $("policy").addEventListener("change", () => {
    renderParams($("params"), page.schemas[$("policy").value]);
    describePolicy($("policy-description"), page.schemas[$("policy").value]);
  });
  $("run-form").addEventListener("submit", runSingle);
  $("stop").addEventListener("click", () => page.connection.cancel());
  $("share").addEventListener("click", async () => {
    const link = await shareLink();
    history.replaceState(null, "", link);
    navigator.clipboard?.writeText(link).catch(() => {});
    setStatus("a link to this view is in the address bar (and the clipboard)", "done");
  });
  wireButtons();
  $("trace").addEventListener("change", (e) => {
    const option = e.target.selectedOptions[0];
    // The keys act on the player from now on, not on the list.
    e.target.blur();
    if (!option?.value) return;
    loadTrace(option.dataset.name).then((runs) => {
      if (runs && page.compare.open && runs.length > 1) page.compare.showRecorded(runs);
    }).catch(reportError);
  });
  document.addEventListener("keydown", onKey);
  document.addEventListener("click", () => page.tooltip.unpin());
  window.addEventListener("resize", () => refocus());
  page.compare = new CompareView({ schemas: page.schemas, defaultPolicy: page.rules.defaults.policy,
                                   connection: page.connection, readSetup,
                                   baselines: page.baselines, setRunning, replayOnly: Boolean(info.replay_only),
                                   onChange: () => saveView() });
  $("compare-toggle").addEventListener("click", () => page.compare.toggle());
  page.whatIf = new WhatIfPanel({ schemas: page.schemas, info, url: page.connection.url,
                                  events: () => page.player.events, shownStep: () => page.player.phase?.step ?? null });
  $("compare-share").addEventListener("click", async () => {
    const link = await shareLink();
    history.replaceState(null, "", link);
    navigator.clipboard?.writeText(link).catch(() => {});
    page.compare.setStatus("a link to this comparison is in the address bar (and the clipboard)", "done");
  });
  if (info.replay_only) {
    $("run").disabled = true;
    $("run").title = REPLAY_ONLY_REASON;
  }
  if (view.present) page.presentation.enter({ fullscreen: false });
  await loadTraceList();
  if (link.compare) restoreCompare(link.compare, problems);
  if (view.trace) {
    const option = [...$("trace").options].find((o) => o.dataset.name === view.trace);
    if (option) $("trace").value = option.value;
    const runs = await loadTrace(view.trace, { at: parsePosition(view.step, view.phase), runIndex: Number(view.run ?? 0) })
      .catch(reportError);
    if (runs && link.compare) {
      page.compare.showRecorded(runs);
      if (view.step) page.compare.group.seekStep(Number(view.step) - 1, { stepIndex: 0, name: "commit", layer: null, walked: 0 });
    }
  } else if (!problems.length) {
    setStatus(info.replay_only ? "replay only: no model is loaded here; choose a recorded run under “Replay a recorded run”"
                               : "ready: type a prompt, pick a policy, press Run — or replay a recorded run", "done");
  }
  if (problems.length) {
    const text = `This link asked for what the form cannot take: ${problems.join("; ")}.`;
    setStatus(text, "error");
    if (page.compare.open) page.compare.setStatus(text, "error");
  }
  scheduleDraw();
}

/** Compare mode from a link: its panes (checked like the form's setup) and alignment. */
function restoreCompare(compare, problems) {
  const panes = compare.panes.map((pane) => {
    const checked = checkSetup({ policy: pane.policy, params: pane.params }, page.schemas, page.rules);
    problems.push(...checked.problems.map((problem) => `compare pane: ${problem}`));
    return { policy: checked.setup.policy ?? page.rules.defaults.policy, params: checked.setup.params };
  });
  if (panes.length) page.compare.setPanes(panes);
  page.compare.setAlign(compare.align);
  page.compare.toggle(true);
}

start().catch(reportError);
