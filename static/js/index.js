// Page wiring of /: form, live run, replay and keys. State lives in model/ folds; drawing in view/.

import { Connection, RunFailed } from "./connection.js";
import { foldEvents, parseTrace, runSummary, splitRuns } from "./model/events.js";
import { layoutTree } from "./model/layout.js";
import { baselineKey, checkSetup, decodeLink, encodeLink } from "./model/setup.js";
import { foldPhase } from "./model/phases.js";
import { PhasePlayer } from "./player.js";
import { CompareView, REPLAY_ONLY_REASON } from "./view/compare.js";
import { el } from "./view/dom.js";
import { describePolicy, fillPolicySelect, markInvalid, readParams, renderParams } from "./view/forms.js";
import { renderMetrics, renderOutput, renderTimeline } from "./view/run.js";
import { createTooltip, renderTree, resetTree } from "./view/tree.js";

const $ = (id) => document.getElementById(id);

const page = {
  schemas: {},
  baselines: new Map(), // baselineKey -> ar run_finished, for speedups
  request: null, // the request behind what is on screen
  trace: null, // the shipped trace on screen, by name
  traces: [], // the shipped traces: [{name, url, ...}]
  connection: new Connection(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`,
                             (position) => showQueued(position)),
  tooltip: createTooltip($("tooltip")),
};
page.player = new PhasePlayer({ onChange: scheduleDraw });

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
let shownStep = null;

function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    draw();
  });
}

function draw() {
  const { player } = page;
  const { run, step } = foldPhase(player.events, player.phase);
  const whole = foldEvents(player.events);
  if (step?.step !== shownStep) resetTree($("tree"));
  shownStep = step?.step ?? null;
  if (step) renderTree($("tree"), layoutTree(step), page.tooltip);
  else $("tree").replaceChildren();
  renderTimeline($("step-timeline"), whole, player.phase?.stepIndex ?? -1, (i) => player.seekStep(i));
  $("play").textContent = player.playing ? "❚❚" : "▶";
  renderOutput($("output"), run);
  $("output").dataset.finished = String(Boolean(run.finished));
  renderMetrics($("metrics"), runSummary(run), speedupOf(run), (i) => player.seekStep(i));
}

function speedupOf(run) {
  if (run.finished && run.policy === "ar") return 1;
  if (!run.finished || !page.request) return null;
  const ar = page.baselines.get(baselineKey(page.request));
  return ar && ar.tokens_per_s > 0 ? run.finished.tokens_per_s / ar.tokens_per_s : null;
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
  fillPolicySelect($("policy"), page.schemas, setup.policy ?? "talon");
  renderParams($("params"), page.schemas[$("policy").value], setup.params ?? {});
  describePolicy($("policy-description"), page.schemas[$("policy").value]);
}

// The address bar always holds a link back to what is on screen: the setup (packed into the fragment
// when long), the trace, and compare mode with its panes.
async function shareSetup(setup = readSetup()) {
  const compare = page.compare?.open ? page.compare.state() : null;
  const view = { trace: page.trace, step: compare && page.trace ? page.compare.step() : null };
  const link = await encodeLink({ setup: page.trace ? null : setup, view, compare });
  history.replaceState(null, "", `${location.pathname}${link}`);
}

// ---------------------------------------------------------------- running

function setRunning(running) {
  if (running) page.trace = null; // what is on screen is a live run now
  $("run").disabled = running;
  $("stop").disabled = !running;
  page.compare?.setBusy(running);
}

async function runSingle(event) {
  event.preventDefault();
  // Space belongs to replay once a run starts, not to the Run button that kept focus.
  document.activeElement?.blur();
  const request = readSetup();
  shareSetup(request);
  markInvalid(document, null);
  page.request = request;
  page.player.load([], { follow: true });
  setRunning(true);
  setStatus(`running ${request.policy}…`, "busy");
  try {
    const finished = await page.connection.run(request, (e) => {
      page.player.push(e);
      if (e.type === "verify") setStatus(`running ${request.policy}: step ${e.step}`, "busy");
    });
    if (finished.policy === "ar") page.baselines.set(baselineKey(request), finished);
    setStatus(`finished: ${finished.new_tokens} tokens in ${finished.steps} steps (${finished.stop_reason})`, "done");
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

// ---------------------------------------------------------------- replay

async function loadTraceList() {
  page.traces = await (await fetch("/api/traces")).json();
  for (const trace of page.traces) $("trace").append(el("option", { value: trace.url }, trace.name));
}

/** A shipped trace by name; an unknown name is answered with the names there are. */
async function loadTraceNamed(name, { compare = false } = {}) {
  const trace = page.traces.find((t) => t.name === name);
  if (!trace) {
    page.trace = null;
    $("trace").value = "";
    const names = page.traces.map((t) => t.name).join(", ") || "none";
    setStatus(`There is no trace named "${name}". Shipped traces: ${names}. Choose one under “Replay a recorded run”.`, "error");
    $("trace").focus();
    return null;
  }
  page.trace = name;
  $("trace").value = trace.url;
  const runs = await loadTrace(trace.url);
  if (compare && runs.length > 1) page.compare.showRecorded(runs);
  return runs;
}

async function loadTrace(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`cannot load ${url}: ${response.status}`);
  const runs = splitRuns(parseTrace(await response.text()));
  rememberBaselines(runs);
  const picker = $("trace-run");
  picker.replaceChildren(...runs.map((run, i) => el("option", { value: String(i) }, `${run.policy} · ${run.runId}`)));
  picker.hidden = runs.length < 2;
  picker.onchange = () => showRecorded(runs[Number(picker.value)]);
  $("trace-compare").hidden = runs.length < 2;
  $("trace-compare").onclick = () => page.compare.showRecorded(runs);
  showRecorded(runs[0]);
  return runs;
}

// A trace's own ar run is the baseline of its other runs' speedups.
function rememberBaselines(runs) {
  for (const run of runs) {
    const started = run.events.find((e) => e.type === "run_started");
    const finished = run.events.find((e) => e.type === "run_finished");
    if (run.policy === "ar" && started && finished) page.baselines.set(baselineKey(started), finished);
  }
}

function showRecorded(recorded) {
  const started = recorded.events.find((e) => e.type === "run_started");
  page.request = started ? { prompt: started.prompt, seed: started.seed, temperature: started.temperature,
                             top_k: started.top_k, top_p: started.top_p, max_new_tokens: started.max_new_tokens } : null;
  // The form takes the recorded setup, so a lecturer can re-run it live where a model is loaded.
  if (started) applySetup({ ...page.request, policy: started.policy, params: started.params });
  page.player.load(recorded.events, { follow: false });
  setStatus(`replaying ${recorded.policy}: press Space to play, arrows to step`, "done");
}

// ---------------------------------------------------------------- keys

function onKey(event) {
  if (event.target.closest("input, textarea, select") && event.key !== "Escape") return;
  if (event.target.closest("button") && (event.key === " " || event.key === "Enter")) return;
  const actions = {
    " ": () => page.player.toggle(),
    ArrowRight: () => (event.shiftKey ? page.player.nextStep() : page.player.next()),
    ArrowLeft: () => (event.shiftKey ? page.player.prevStep() : page.player.prev()),
    Home: () => page.player.home(),
    End: () => page.player.end(),
    Escape: () => page.tooltip.unpin(),
  };
  const action = actions[event.key];
  if (action) {
    event.preventDefault();
    action();
  }
}

// ---------------------------------------------------------------- start

async function start() {
  const [schemas, info] = await Promise.all([(await fetch("/api/policies")).json(), (await fetch("/api/info")).json()]);
  page.schemas = schemas;
  const link = await decodeLink(location.search, location.hash);
  const { setup, problems } = checkSetup(link.setup, page.schemas);
  applySetup(setup);
  $("policy").addEventListener("change", () => {
    renderParams($("params"), page.schemas[$("policy").value]);
    describePolicy($("policy-description"), page.schemas[$("policy").value]);
  });
  $("run-form").addEventListener("submit", runSingle);
  $("stop").addEventListener("click", () => page.connection.cancel());
  $("share").addEventListener("click", async () => {
    await shareSetup(readSetup());
    navigator.clipboard?.writeText(location.href).catch(() => {});
    setStatus("link to this setup is in the address bar", "done");
  });
  $("play").addEventListener("click", (e) => {
    e.currentTarget.blur();
    page.player.toggle();
  });
  $("speed").addEventListener("change", (e) => { page.player.speed = Number(e.target.value); });
  $("fit").addEventListener("change", (e) => $("tree").closest(".tree-scroll").classList.toggle("fit", e.target.checked));
  $("step-timeline").querySelector("input[type=range]")
    .addEventListener("input", (e) => page.player.seekStep(Number(e.target.value)));
  $("trace").addEventListener("change", (e) => {
    if (!e.target.value) return;
    loadTraceNamed(e.target.selectedOptions[0].textContent, { compare: page.compare.open })
      .then(() => shareSetup()).catch(reportError);
  });
  document.addEventListener("keydown", onKey);
  document.addEventListener("click", () => page.tooltip.unpin());
  page.compare = new CompareView({ schemas: page.schemas, connection: page.connection, readSetup,
                                   baselines: page.baselines, setRunning, replayOnly: Boolean(info.replay_only),
                                   onChange: () => scheduleLink() });
  $("compare-toggle").addEventListener("click", () => page.compare.toggle());
  $("compare-share").addEventListener("click", async () => {
    await shareSetup();
    navigator.clipboard?.writeText(location.href).catch(() => {});
    page.compare.setStatus("a link to this comparison is in the address bar", "done");
  });
  if (info.replay_only) {
    $("run").disabled = true;
    $("run").title = REPLAY_ONLY_REASON;
  }
  await loadTraceList();
  if (link.compare) {
    const checked = link.compare.panes.map((pane) => checkSetup({ policy: pane.policy, params: pane.params }, page.schemas));
    problems.push(...checked.flatMap((c) => c.problems.map((p) => `compare pane: ${p}`)));
    page.compare.setPanes(checked.map((c) => ({ policy: c.setup.policy ?? "talon", params: c.setup.params })));
    page.compare.setAlign(link.compare.align);
    page.compare.toggle(true);
  }
  if (link.view.trace) {
    await loadTraceNamed(link.view.trace, { compare: Boolean(link.compare) }).catch(reportError);
  } else if (!problems.length) {
    setStatus(info.replay_only ? "replay only: choose a recorded run under “Replay a recorded run”"
                               : "ready: type a prompt, pick a policy, press Run", "done");
  }
  if (problems.length) reportLinkProblems(problems);
  scheduleDraw();
}

// What a link asked for that could not be used is said, never dropped silently.
function reportLinkProblems(problems) {
  const text = `This link asked for something the form cannot take: ${problems.join("; ")}.`;
  setStatus(text, "error");
  if (page.compare.open) page.compare.setStatus(text, "error");
}

let linkPending = false;

function scheduleLink() {
  if (linkPending || !page.compare) return;
  linkPending = true;
  setTimeout(() => {
    linkPending = false;
    if (page.compare.open) shareSetup().catch(() => {});
  }, 250);
}

start().catch(reportError);
