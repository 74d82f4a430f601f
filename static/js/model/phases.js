// A step played as phases, the way a lecture tells it: draft layer 1 … D (candidates proposed, kept or
// pruned with the reason), rerank (where the policy has one), verify (one target forward over the
// whole tree), accept (the walk down the tree, one phase per node it visits), commit (the cache keeps
// the accepted path). A phase is a position in the run's events: how many to fold (`end`) and, in
// the accept walk, how many of the walk's nodes have been decided (`walked`). No DOM.

import { foldEvents } from "./events.js";
import { reranks } from "./policies.js";

export const PHASE_NAMES = ["draft", "rerank", "verify", "accept", "commit"];

/**
 * Every phase of a run's events, in order. `policies` are the served policies (/api/policies): one whose
 * every step ends in a rerank gets a rerank phase each step; others only when their tree drops something.
 *
 * Phase: { index, step, stepIndex, name, layer, end, walked, walkLength }
 *   step       the engine's step number; stepIndex its 0-based place in the run
 *   layer      draft: the layer's depth; null otherwise
 *   end        events to fold for this phase (a prefix of the list)
 *   walked     verify: 0; accept: 1 … walkLength (nodes of the walk decided so far); commit: walkLength
 *
 * Example: a chain step with two draft layers, verified with an accepted path [0, 1] gives
 * draft 1, draft 2, verify, accept (walked 1), accept (walked 2), commit.
 */
export function phasesOf(events, policies = {}) {
  const policy = events.find((e) => e.type === "run_started")?.policy ?? events[0]?.policy;
  const phases = [];
  stepSpans(events).forEach((span, stepIndex) => {
    const add = (name, end, extra = {}) => phases.push({ index: phases.length, step: span.step, stepIndex, name,
                                                       layer: null, end, walked: 0, walkLength: 0, ...extra });
    for (const i of span.layers) add("draft", i + 1, { layer: events[i].depth });
    const tree = span.tree == null ? null : events[span.tree];
    if (tree && (tree.pruned?.length || reranks(policies, policy))) add("rerank", span.tree + 1);
    if (span.verify != null) {
      const walkLength = walkNodes(events[span.verify]).length;
      add("verify", span.verify + 1, { walkLength });
      for (let k = 1; k <= walkLength; k++) add("accept", span.verify + 1, { walked: k, walkLength });
    }
    if (span.metrics != null) {
      const walkLength = span.verify == null ? 0 : walkNodes(events[span.verify]).length;
      add("commit", span.end, { walked: walkLength, walkLength });
    }
  });
  return phases;
}

/** Per step, where its events lie: draft layers, tree, verify, step_metrics, and the end of the step. */
function stepSpans(events) {
  const spans = [];
  events.forEach((event, i) => {
    if (event.step == null) return;
    let span = spans[spans.length - 1];
    if (!span || span.step !== event.step) {
      span = { step: event.step, layers: [], tree: null, verify: null, metrics: null, end: i + 1 };
      spans.push(span);
    }
    span.end = i + 1;
    if (event.type === "draft_layer") span.layers.push(i);
    else if (event.type === "tree") span.tree = i;
    else if (event.type === "verify") span.verify = i;
    else if (event.type === "step_metrics") span.metrics = i;
  });
  // The run's closing events (run_finished) belong to the last step's commit, so End shows the totals.
  const last = spans[spans.length - 1];
  if (last && events.slice(last.end).every((e) => e.step == null)) last.end = events.length;
  return spans;
}

/** The tree indices the acceptance walk visited, root first: the event's `walk` (schema 2) or the accepted path. */
export function walkNodes(verify) {
  return verify.walk ? verify.walk.map((w) => w.node) : verify.accepted_path;
}

// ---------------------------------------------------------------- folding to a phase

/**
 * The run as it stands at `phase`: events folded to `phase.end`, and in verify and accept the
 * target's verdicts hidden below the nodes the walk has not reached yet.
 * Returns { run, step, verify } (the step on screen and its verify event, if any).
 */
export function foldPhase(events, phase) {
  if (!phase) return { run: foldEvents([]), step: null, verify: null };
  const run = foldEvents(events.slice(0, phase.end));
  const step = run.steps[run.steps.length - 1] ?? null;
  if (!step) return { run, step, verify: null };
  labelRootAhead(step, events, phase.end);
  const verify = stepEvent(events, phase, "verify");
  if (verify && (phase.name === "verify" || phase.name === "accept")) hideUnwalked(step, verify, phase.walked);
  step.phase = phase.name;
  return { run, step, verify };
}

/** The step's event of `type` at or before `phase.end`, or null. */
export function stepEvent(events, phase, type) {
  let i = phase.end - 1;
  while (i >= 0 && events[i].step == null) i--; // the run's closing events, folded into the last commit
  for (; i >= 0 && events[i].step === phase.step; i--) if (events[i].type === type) return events[i];
  return null;
}

// In the draft phases the root's token is not known from the folded events yet; its tree event names
// it. Plain decoding has no tree event: its root is the token the step before emitted.
function labelRootAhead(step, events, from) {
  const root = step.nodes.get("n0");
  if (root.token != null) return;
  for (let i = from; i < events.length && events[i].step === step.step; i++) {
    if (events[i].type === "tree" && events[i].nodes[0]) {
      root.token = events[i].nodes[0].token;
      root.text = events[i].nodes[0].text;
      return;
    }
  }
  for (let i = from - 1; i >= 0; i--) {
    if (events[i].type === "verify" && events[i].step !== step.step) {
      root.token = events[i].emitted.token;
      root.text = events[i].emitted.text;
      return;
    }
  }
}

/** Nodes whose parent the walk has not decided on are shown as still waiting (kept); the emitted token waits for the walk's end. */
function hideUnwalked(step, verify, walked) {
  const walk = walkNodes(verify);
  const decided = new Set(walk.slice(0, walked).map((post) => step.postToId[post]));
  for (const node of step.nodes.values()) {
    if (node.status === "root" || node.id === "emitted" || node.verdict == null) continue;
    if (!decided.has(node.parent)) {
      node.status = "kept";
      node.verdict = null;
    }
  }
  const allDecided = walked >= walk.length;
  if (!allDecided) step.nodes.delete("emitted");
  step.acceptedPath = step.acceptedPath.filter((id, i) => i === 0 || decided.has(step.nodes.get(id)?.parent));
  step.walked = walked;
  step.walk = walk.map((post) => step.postToId[post]);
}

// ---------------------------------------------------------------- positions

/**
 * A phase's place within its step, comparable across runs: drafts by layer, then rerank, verify,
 * accept by walk position, commit.
 */
export function positionOf(phase) {
  return { stepIndex: phase.stepIndex, name: phase.name, layer: phase.layer, walked: phase.walked };
}

function rank(position) {
  const order = PHASE_NAMES.indexOf(position.name);
  const sub = position.name === "draft" ? position.layer ?? 0 : position.name === "accept" ? position.walked ?? 0 : 0;
  return order * 1000 + sub;
}

/**
 * The phase that best stands for `position` in `phases`: in the same step, the last phase at or
 * before it (draft layer 5 of a 3-layer step is its layer 3; a rerank a policy lacks is its last
 * draft layer), or the step's first phase; past the last step, the last phase.
 */
export function nearestPhase(phases, position) {
  if (!phases.length) return null;
  const inStep = phases.filter((p) => p.stepIndex === position.stepIndex);
  if (!inStep.length) return position.stepIndex < 0 ? phases[0] : phases[phases.length - 1];
  const wanted = rank(position);
  const before = inStep.filter((p) => rank(p) <= wanted);
  return before.length ? before[before.length - 1] : inStep[0];
}

/** "draft-3", "rerank", "verify", "accept-2", "commit": a phase in a URL. */
export function phaseKey(phase) {
  if (phase.name === "draft") return `draft-${phase.layer}`;
  if (phase.name === "accept") return `accept-${phase.walked}`;
  return phase.name;
}

/** The position a URL's step (1-based) and phase key stand for; null where they do not parse. */
export function parsePosition(step, key) {
  const stepIndex = Number(step) - 1;
  const match = /^(draft|rerank|verify|accept|commit)(?:-(\d+))?$/.exec(key ?? "commit");
  if (!Number.isInteger(stepIndex) || stepIndex < 0 || !match) return null;
  const sub = match[2] == null ? null : Number(match[2]);
  return { stepIndex, name: match[1], layer: match[1] === "draft" ? sub ?? 1 : null,
           walked: match[1] === "accept" ? sub ?? 1 : 0 };
}

/** A phase's name for people: "draft · layer 3", "accept · node 2 of 4". */
export function phaseTitle(phase) {
  if (!phase) return "no phase yet";
  if (phase.name === "draft") return `draft · layer ${phase.layer}`;
  if (phase.name === "accept") return `accept · node ${phase.walked} of ${phase.walkLength}`;
  return phase.name;
}
