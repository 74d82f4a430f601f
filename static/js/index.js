// Page wiring of /: form, live run, replay and keys. State lives in model/ folds; drawing in view/.

import { Connection, RunFailed } from "./connection.js";
import { foldEvents, parseTrace, runSummary, splitRuns } from "./model/events.js";
import { layoutTree } from "./model/layout.js";
import { baselineKey, decodeSetup, encodeSetup } from "./model/setup.js";
import { foldPhase } from "./model/phases.js";
import { PhasePlayer } from "./player.js";
import { CompareView } from "./view/compare.js";
import { el } from "./view/dom.js";
import { fillPolicySelect, markInvalid, readParams, renderParams } from "./view/forms.js";
import { renderMetrics, renderOutput, renderTimeline } from "./view/run.js";
import { createTooltip, renderTree, resetTree } from "./view/tree.js";

const $ = (id) => document.getElementById(id);

const page = {
  schemas: {},
  baselines: new Map(), // baselineKey -> ar run_finished, for speedups
  request: null, // the request behind what is on screen
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
}

function shareSetup(setup) {
  history.replaceState(null, "", `${location.pathname}?${encodeSetup(setup)}`);
}

// ---------------------------------------------------------------- running

function setRunning(running) {
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
  const traces = await (await fetch("/api/traces")).json();
  for (const trace of traces) $("trace").append(el("option", { value: trace.url }, trace.name));
}

async function loadTrace(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`cannot load ${url}: ${response.status}`);
  const runs = splitRuns(parseTrace(await response.text()));
  const picker = $("trace-run");
  picker.replaceChildren(...runs.map((run, i) => el("option", { value: String(i) }, `${run.policy} · ${run.runId}`)));
  picker.hidden = runs.length < 2;
  picker.onchange = () => showRecorded(runs[Number(picker.value)]);
  $("trace-compare").hidden = runs.length < 2;
  $("trace-compare").onclick = () => page.compare.showRecorded(runs);
  showRecorded(runs[0]);
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
  page.schemas = await (await fetch("/api/policies")).json();
  const setup = decodeSetup(location.search);
  applySetup(setup);
  $("policy").addEventListener("change", () => renderParams($("params"), page.schemas[$("policy").value]));
  $("run-form").addEventListener("submit", runSingle);
  $("stop").addEventListener("click", () => page.connection.cancel());
  $("share").addEventListener("click", () => {
    shareSetup(readSetup());
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
    history.replaceState(null, "", `${location.pathname}?${encodeSetup({ trace: e.target.selectedOptions[0].textContent })}`);
    loadTrace(e.target.value).catch(reportError);
  });
  document.addEventListener("keydown", onKey);
  document.addEventListener("click", () => page.tooltip.unpin());
  page.compare = new CompareView({ schemas: page.schemas, connection: page.connection, readSetup,
                                   baselines: page.baselines, setRunning });
  $("compare-toggle").addEventListener("click", () => page.compare.toggle());
  await loadTraceList();
  if (setup.trace) {
    const url = `/static/traces/${encodeURIComponent(setup.trace)}.jsonl`;
    $("trace").value = url;
    await loadTrace(url).catch(reportError);
  } else {
    setStatus("ready: type a prompt, pick a policy, press Run", "done");
  }
  scheduleDraw();
}

start().catch(reportError);
