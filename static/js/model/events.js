// Folding engine events into run state, and splitting a trace into runs and steps. No DOM.

import { bytesLabel, decodeByteRun, formatProbability } from "./format.js";

export function createRun() {
  return { runId: null, policy: null, started: null, steps: [], text: [], metrics: [],
           adjustments: [], finished: null, error: null };
}

export function foldEvents(events) {
  const run = createRun();
  for (const event of events) applyEvent(run, event);
  return run;
}

function stepOf(run, number) {
  let step = run.steps[run.steps.length - 1];
  if (!step || step.step !== number) {
    step = run.steps.find((s) => s.step === number);
  }
  if (!step) {
    step = { step: number, phase: "draft", nodes: new Map(), layers: [], postToId: [],
             emitted: null, acceptedPath: [], metrics: null, text: null };
    step.nodes.set("n0", rootNode());
    run.steps.push(step);
  }
  return step;
}

function rootNode() {
  return { id: "n0", parent: null, token: null, text: "", depth: 0, q: 1, score: 1,
           status: "root", reason: null, threshold: null, p: null, verdict: null, index: 0 };
}

const HANDLERS = {
  run_started(run, event) {
    run.runId = event.run_id;
    run.policy = event.policy;
    run.started = event;
  },
  draft_layer(run, event) {
    const step = stepOf(run, event.step);
    step.layers.push({ depth: event.depth, threshold: event.threshold ?? null, anchor: event.anchor ?? null });
    event.candidates.forEach((candidate, i) => addCandidate(step, event.depth, candidate, i));
    decodeByteRuns(step);
  },
  tree(run, event) {
    const step = stepOf(run, event.step);
    step.phase = "tree";
    for (const candidate of event.pruned) prunedAtRerank(step, candidate);
    step.postToId = mapVerifiedTree(step, event.nodes);
    // The verified tree's own index of each node: rows of the attention mask and the KV cache.
    step.postToId.forEach((id, post) => { step.nodes.get(id).post = post; });
    step.tree = event.nodes;
    labelRoot(step, event.nodes[0]);
    decodeByteRuns(step);
  },
  verify(run, event) {
    const step = stepOf(run, event.step);
    step.phase = "verify";
    if (!step.tree) rootFromPreviousStep(run, step);
    for (const verdict of event.nodes) applyVerdict(step, verdict);
    step.acceptedPath = event.accepted_path.map((post) => step.postToId[post]).filter(Boolean);
    if (event.emitted) addEmitted(run, step, event.emitted); // none where the text ended at an accepted draft
    decodeByteRuns(step);
  },
  text(run, event) {
    const step = stepOf(run, event.step);
    step.text = { text: event.text, tokens: event.tokens.length, accepted: event.accepted };
    run.text.push({ step: event.step, text: event.text, tokens: event.tokens.length, accepted: event.accepted });
  },
  step_metrics(run, event) {
    stepOf(run, event.step).metrics = event;
    run.metrics.push(event);
  },
  policy_adjusted(run, event) {
    run.adjustments.push(event);
  },
  run_finished(run, event) {
    run.finished = event;
  },
  error(run, event) {
    run.error = event;
  },
};

export function applyEvent(run, event) {
  const handler = HANDLERS[event.type];
  if (handler) handler(run, event);
  return run;
}

function addCandidate(step, depth, candidate, i) {
  const id = candidate.kept && candidate.node != null ? `n${candidate.node}` : `c${depth}.${i}`;
  step.nodes.set(id, {
    id, parent: `n${candidate.parent}`, token: candidate.token, text: candidate.text,
    depth: candidate.depth, q: candidate.q, score: candidate.score, source: candidate.source,
    status: candidate.kept ? "kept" : "pruned", reason: candidate.reason, expanded: candidate.expanded ?? candidate.kept,
    threshold: candidate.threshold ?? null, detail: candidate.detail ?? {},
    p: null, verdict: null, index: candidate.node ?? null, byteHex: candidate.byte_hex ?? null,
  });
}

/**
 * Tokens that are each part of a multi-byte character (byte_hex set) read together with their
 * parents': the node that completes the character shows it (`shown`, with `joined` saying so), a node
 * that does not yet shows its own bytes, so a path reads "⟨20 f0 9f⟩ → ⟨8c⟩ → ␣🌊", not ⟨bytes⟩ thrice.
 */
function decodeByteRuns(step) {
  for (const node of step.nodes.values()) {
    if (!node.byteHex) continue;
    const run = [node.byteHex];
    for (let up = step.nodes.get(node.parent); up?.byteHex; up = step.nodes.get(up.parent)) run.unshift(up.byteHex);
    const text = decodeByteRun(run);
    node.shown = text ?? bytesLabel(node.byteHex);
    node.joined = text != null && run.length > 1 ? run.length : null;
  }
}

function prunedAtRerank(step, candidate) {
  const node = step.nodes.get(`n${candidate.node}`);
  if (node) {
    node.status = "pruned";
    node.reason = "rerank";
  }
}

/**
 * Post-rerank index -> node id. The verified tree holds the kept nodes in increasing
 * pre-rerank index order (or says so with `origin`). When the draft layers were not
 * seen (or do not match), the tree event alone builds the nodes.
 */
function mapVerifiedTree(step, treeNodes) {
  if (treeNodes.every((n) => n.origin != null)) {
    return treeNodes.map((n) => ensureNode(step, `n${n.origin}`, n, (post) => `n${treeNodes[post].origin}`));
  }
  const keptIds = [...step.nodes.values()]
    .filter((n) => n.status === "kept" || n.status === "root")
    .sort((a, b) => a.index - b.index)
    .map((n) => n.id);
  if (keptIds.length === treeNodes.length) return keptIds;
  for (const [id, node] of step.nodes) if (node.status === "kept") step.nodes.delete(id);
  return treeNodes.map((n) => ensureNode(step, n.node === 0 ? "n0" : `t${n.node}`, n,
                                         (post) => (post === 0 ? "n0" : `t${post}`)));
}

/**
 * Plain decoding sends no tree: its root, the context's last token, is the token the previous step
 * emitted, so the tree and the caption name the same token (step 1's is the prompt's last).
 */
function rootFromPreviousStep(run, step) {
  const previous = run.steps[run.steps.indexOf(step) - 1]?.emitted;
  if (!previous) return;
  const root = step.nodes.get("n0");
  Object.assign(root, { token: previous.token, text: previous.text, byteHex: previous.byte_hex ?? null });
}

// The root stands for the context; the tree event names its last token.
function labelRoot(step, treeRoot) {
  if (!treeRoot) return;
  const root = step.nodes.get("n0");
  root.token = treeRoot.token;
  root.text = treeRoot.text;
  root.byteHex = treeRoot.byte_hex ?? null;
}

function ensureNode(step, id, treeNode, idOfPost) {
  if (!step.nodes.has(id)) {
    step.nodes.set(id, {
      id, parent: idOfPost(treeNode.parent), token: treeNode.token, text: treeNode.text,
      depth: treeNode.depth, q: treeNode.q, score: treeNode.score, source: treeNode.source,
      status: "kept", reason: null, threshold: null, detail: {}, p: null, verdict: null, index: treeNode.node,
      byteHex: treeNode.byte_hex ?? null,
    });
  }
  return id;
}

function applyVerdict(step, verdict) {
  const node = step.nodes.get(step.postToId[verdict.node]);
  if (!node || node.status === "root") return;
  node.p = verdict.p;
  node.verdict = verdict.verdict;
  if (verdict.verdict !== "unreached") node.status = verdict.verdict;
}

function addEmitted(run, step, emitted) {
  const parentId = step.postToId[emitted.parent] ?? "n0";
  const parent = step.nodes.get(parentId);
  // Plain decoding drafts nothing (its run has no drafter): its token is the target's own, not a bonus
  // after an accepted path.
  const plain = run.started?.drafter === "none";
  step.emitted = { ...emitted, id: "emitted" };
  step.nodes.set("emitted", {
    id: "emitted", parent: parentId, token: emitted.token, text: emitted.text,
    depth: (parent?.depth ?? 0) + 1, q: null, score: null, source: "target",
    status: emitted.kind, reason: null, threshold: null, detail: {}, p: emitted.p, verdict: emitted.kind, index: null,
    byteHex: emitted.byte_hex ?? null, plain,
  });
}

export function treeShape(step) {
  let depth = 0;
  const widths = new Map();
  for (const node of step.nodes.values()) {
    if (node.status === "root" || node.status === "pruned" || node.status === "recovered" || node.status === "bonus") continue;
    depth = Math.max(depth, node.depth);
    widths.set(node.depth, (widths.get(node.depth) ?? 0) + 1);
  }
  return { depth, width: Math.max(0, ...widths.values()), size: [...widths.values()].reduce((a, b) => a + b, 0) };
}

/** What a tooltip says about one node. */
export function describeNode(node) {
  const rows = [
    ["token", node.text == null ? "(context)" : JSON.stringify(node.text)],
    ["depth", String(node.depth)],
  ];
  if (node.status === "root") return rows.concat([["decision", "context: the tokens so far"]]);
  if (node.q != null) rows.push(["draft q", formatProbability(node.q)]);
  if (node.score != null) rows.push(["path score", formatProbability(node.score)]);
  if (node.threshold != null) rows.push(["threshold", formatProbability(node.threshold)]);
  rows.push(["target p", node.p == null ? "not verified" : formatProbability(node.p)]);
  for (const [key, value] of Object.entries(node.detail ?? {})) rows.push([key, formatProbability(value)]);
  if (node.byteHex) {
    rows.push(["bytes", bytesLabel(node.byteHex)]);
    rows.push(["note", node.joined ? `completes ${JSON.stringify(node.shown)} with the bytes of its ${node.joined - 1} parent token(s)`
      : "part of a multi-byte character (an emoji or accented letter): its children's bytes complete it"]);
  } else if (/^\uFFFD+$/.test(node.text ?? "")) {
    rows.push(["note", "part of a multi-byte character (the first bytes of an emoji or accented letter)"]);
  }
  const special = SPECIAL_TOKENS[node.text];
  if (special) rows.push(["note", special]);
  rows.push(["decision", decisionText(node)]);
  if (node.hiddenPruned) rows.push(["pruned not drawn", String(node.hiddenPruned)]);
  return rows;
}

// The chat template's markers, which labels show as ⟨start⟩ and ⟨end⟩ (format.js tokenLabel).
const SPECIAL_TOKENS = {
  "<|im_start|>": "⟨start⟩ is the chat template's start-of-turn marker (<|im_start|>), not text: a draft that proposes it guesses a new turn begins",
  "<|im_end|>": "⟨end⟩ is the chat template's end-of-turn marker (<|im_end|>): generation stops where the target emits it",
  "<|endoftext|>": "⟨endoftext⟩ is the model's end-of-text marker: generation stops where the target emits it",
};

const REASONS = {
  topk: "top-K of its parent",
  threshold: "path score passed the layer threshold",
  below_threshold: "path score below the layer threshold",
  budget: "node budget spent",
  depth_limit: "depth limit",
  rerank: "dropped by the final rerank",
  cost: "not worth its cost",
};

function decisionText(node) {
  const why = REASONS[node.reason] ?? node.reason ?? "";
  switch (node.status) {
    case "pruned": return `pruned: ${why}`;
    case "kept": return node.verdict === "unreached" ? "kept; not reached by verify" : `kept: ${why}`;
    case "accepted": return "accepted by the target";
    case "rejected": return "rejected by the target";
    case "recovered": return "recovered: the target's own token where it rejected the drafts";
    case "bonus": return node.plain ? "the target's own next token (plain decoding drafts nothing)"
      : "bonus: the target's next token after a fully accepted path";
    default: return node.status;
  }
}

// ---------------------------------------------------------------- text and metrics

/** Output segments per step; falls back to the final text where deltas do not add up to it. */
export function outputSegments(run) {
  const joined = run.text.map((s) => s.text).join("");
  if (run.finished && joined !== run.finished.text) {
    return [{ step: null, text: run.finished.text, tokens: run.finished.new_tokens, accepted: null }];
  }
  return run.text;
}

export function runSummary(run) {
  const m = run.metrics;
  const steps = m.length;
  const emitted = m.reduce((a, s) => a + s.emitted, 0);
  const forwards = m.reduce((a, s) => a + s.draft_forwards, 0);
  const f = run.finished;
  return {
    steps: f?.steps ?? steps,
    tokens: f?.new_tokens ?? (m.length ? m[m.length - 1].new_tokens : 0),
    tau: f?.tau ?? (steps ? emitted / steps : null),
    delta: f?.delta ?? (steps ? forwards / steps : null),
    c: f?.c ?? null,
    tokensPerS: f?.tokens_per_s ?? liveTokensPerS(m),
    adjustments: run.adjustments,
    series: {
      accepted: m.map((s) => s.accepted),
      treeSize: m.map((s) => s.tree_size),
      depth: m.map((s) => s.depth),
      width: m.map((s) => s.width),
    },
  };
}

// While a run is going, the steps' own timings give its speed so far.
function liveTokensPerS(metrics) {
  const ms = metrics.reduce((a, s) => a + s.draft_ms + s.verify_ms + s.other_ms, 0);
  return ms > 0 ? metrics[metrics.length - 1].new_tokens / (ms / 1000) : null;
}

// ---------------------------------------------------------------- replay

/** One event per JSON line. */
export function parseTrace(text) {
  return text.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
}

/** Events grouped by run, in order of first appearance. */
export function splitRuns(events) {
  const runs = new Map();
  for (const event of events) {
    if (!runs.has(event.run_id)) runs.set(event.run_id, []);
    runs.get(event.run_id).push(event);
  }
  return [...runs.entries()].map(([runId, list]) => ({ runId, policy: list[0].policy, events: list }));
}

/** For each step in order, the event count up to and including its last event. */
export function stepEnds(events) {
  const ends = [];
  events.forEach((event, i) => {
    if (event.step == null) return;
    const last = ends[ends.length - 1];
    if (last && last.step === event.step) last.end = i + 1;
    else ends.push({ step: event.step, end: i + 1 });
  });
  return ends;
}

/** How long replay lingers after an event, so each phase can be followed. */
export function replayDelay(event, speed = 1) {
  const base = { draft_layer: 450, tree: 500, verify: 900, step_metrics: 250 }[event.type] ?? 40;
  return base / speed;
}
