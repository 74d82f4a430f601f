// The pure part of the page: folding engine events into run state, tree layout,
// formatting, URL state and comparison. No DOM here, so `node --test` covers it.

export const STATUSES = ["kept", "pruned", "accepted", "rejected", "recovered", "bonus"];

const VISIBLE_WHITESPACE = { " ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍" };

/** A token's text with whitespace made visible, for node labels: " the\n" -> "␣the↵". */
export function tokenLabel(text) {
  if (text === "" || text == null) return "∅";
  return Array.from(text, (ch) => VISIBLE_WHITESPACE[ch] ?? ch).join("");
}

/** Shortens a label to `max` characters, marking the cut. */
export function truncate(label, max = 9) {
  const chars = Array.from(label);
  return chars.length <= max ? label : chars.slice(0, max - 1).join("") + "…";
}

export function formatNumber(value, digits = 2) {
  if (value == null || Number.isNaN(value)) return "–";
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString("en-US");
  return Number(value).toFixed(digits);
}

/** Probabilities span many decades; small ones read better in scientific notation. */
export function formatProbability(value) {
  if (value == null) return "–";
  if (value === 0) return "0";
  return value >= 0.001 ? value.toFixed(4) : value.toExponential(2);
}

// ---------------------------------------------------------------- run state

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
  },
  tree(run, event) {
    const step = stepOf(run, event.step);
    step.phase = "tree";
    for (const candidate of event.pruned) prunedAtRerank(step, candidate);
    step.postToId = mapVerifiedTree(step, event.nodes);
    labelRoot(step, event.nodes[0]);
  },
  verify(run, event) {
    const step = stepOf(run, event.step);
    step.phase = "verify";
    for (const verdict of event.nodes) applyVerdict(step, verdict);
    step.acceptedPath = event.accepted_path.map((post) => step.postToId[post]).filter(Boolean);
    addEmitted(step, event.emitted);
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
    status: candidate.kept ? "kept" : "pruned", reason: candidate.reason,
    threshold: candidate.threshold ?? null, detail: candidate.detail ?? {},
    p: null, verdict: null, index: candidate.node ?? null,
  });
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

// The root stands for the context; the tree event names its last token.
function labelRoot(step, treeRoot) {
  if (!treeRoot) return;
  const root = step.nodes.get("n0");
  root.token = treeRoot.token;
  root.text = treeRoot.text;
}

function ensureNode(step, id, treeNode, idOfPost) {
  if (!step.nodes.has(id)) {
    step.nodes.set(id, {
      id, parent: idOfPost(treeNode.parent), token: treeNode.token, text: treeNode.text,
      depth: treeNode.depth, q: treeNode.q, score: treeNode.score, source: treeNode.source,
      status: "kept", reason: null, threshold: null, detail: {}, p: null, verdict: null, index: treeNode.node,
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

function addEmitted(step, emitted) {
  const parentId = step.postToId[emitted.parent] ?? "n0";
  const parent = step.nodes.get(parentId);
  step.emitted = { ...emitted, id: "emitted" };
  step.nodes.set("emitted", {
    id: "emitted", parent: parentId, token: emitted.token, text: emitted.text,
    depth: (parent?.depth ?? 0) + 1, q: null, score: null, source: "target",
    status: emitted.kind, reason: null, threshold: null, detail: {}, p: emitted.p, verdict: emitted.kind, index: null,
  });
}

// ---------------------------------------------------------------- tree layout

export const LAYOUT = { column: 96, row: 24, nodeWidth: 80, nodeHeight: 18, top: 30, left: 8 };

/**
 * Places a step's nodes: depth left to right, siblings top to bottom by score,
 * a parent centred on its children. Pruned candidates beyond `maxPruned` per
 * parent are counted on the parent (`hiddenPruned`) instead of drawn.
 * Example: root -> a (kept), b (pruned) gives a at row 0, b at row 1, root at row 0.5.
 */
export function layoutTree(step, { maxPruned = 3 } = {}) {
  const children = childrenByParent(step, maxPruned);
  const placed = new Map();
  let row = 0;
  const place = (id) => {
    const kids = children.visible.get(id) ?? [];
    kids.forEach(place);
    const y = kids.length ? (placed.get(kids[0]).row + placed.get(kids[kids.length - 1]).row) / 2 : row++;
    placed.set(id, { row: y });
  };
  place("n0");
  const nodes = [...placed.keys()].map((id) => {
    const node = step.nodes.get(id);
    return { ...node, hiddenPruned: children.hidden.get(id) ?? 0,
             x: LAYOUT.left + node.depth * LAYOUT.column, y: LAYOUT.top + placed.get(id).row * LAYOUT.row };
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges = nodes.filter((n) => n.parent && byId.has(n.parent))
    .map((n) => ({ from: byId.get(n.parent), to: n, status: n.status }));
  const maxDepth = nodes.reduce((m, n) => Math.max(m, n.depth), 0);
  return {
    nodes, edges, layers: step.layers,
    width: LAYOUT.left * 2 + maxDepth * LAYOUT.column + LAYOUT.nodeWidth,
    height: LAYOUT.top + Math.max(row, 1) * LAYOUT.row,
  };
}

function childrenByParent(step, maxPruned) {
  const all = new Map();
  for (const node of step.nodes.values()) {
    if (node.parent == null) continue;
    if (!all.has(node.parent)) all.set(node.parent, []);
    all.get(node.parent).push(node);
  }
  const visible = new Map();
  const hidden = new Map();
  for (const [parent, kids] of all) {
    kids.sort(childOrder);
    const pruned = kids.filter((k) => k.status === "pruned" && k.reason !== "rerank");
    const shownPruned = new Set(pruned.slice(0, maxPruned));
    const shown = kids.filter((k) => !pruned.includes(k) || shownPruned.has(k));
    visible.set(parent, shown.map((k) => k.id));
    if (pruned.length > shownPruned.size) hidden.set(parent, pruned.length - shownPruned.size);
  }
  return { visible, hidden };
}

// The emitted token goes first under its parent, then drafts by path score.
function childOrder(a, b) {
  const rank = (n) => (n.status === "recovered" || n.status === "bonus" ? 0 : 1);
  return rank(a) - rank(b) || (b.score ?? 0) - (a.score ?? 0);
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
  rows.push(["decision", decisionText(node)]);
  if (node.hiddenPruned) rows.push(["pruned not drawn", String(node.hiddenPruned)]);
  return rows;
}

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
    case "bonus": return "bonus: the target's next token after a fully accepted path";
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

/** A CSS shade class from the number of accepted drafts in a step: 0..8, 8 meaning 8 or more. */
export function shadeClass(accepted) {
  return accepted == null ? "shade-none" : `shade-${Math.min(8, Math.max(0, accepted))}`;
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

/** The settings that must match for two runs' speeds and outputs to be compared. */
export function baselineKey(request) {
  const { prompt, seed, temperature, top_k = 0, top_p = 1, max_new_tokens } = request;
  return JSON.stringify([prompt, seed, temperature, top_k, top_p, max_new_tokens]);
}

/** Comparison table rows; `ar` is the plain decoding run that speedups and identity refer to. */
export function compareRows(results, ar) {
  return results.map(({ label, finished }) => ({
    label,
    tokensPerS: finished.tokens_per_s,
    tau: finished.tau,
    delta: finished.delta,
    steps: finished.steps,
    speedup: ar && ar.tokens_per_s > 0 ? finished.tokens_per_s / ar.tokens_per_s : null,
    identical: ar ? finished.text === ar.text : null,
  }));
}

// ---------------------------------------------------------------- replay

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

// ---------------------------------------------------------------- forms and URL

/** Labelled controls for a policy's parameters, from its JSON schema. */
export function paramControls(schema) {
  return Object.entries(schema?.properties ?? {}).map(([name, prop]) => ({
    name,
    label: prop.title ?? name,
    kind: prop.type === "boolean" ? "boolean" : prop.type === "integer" ? "integer" : "number",
    value: prop.default,
    min: prop.minimum ?? prop.exclusiveMinimum ?? null,
    max: prop.maximum ?? prop.exclusiveMaximum ?? null,
    step: prop.type === "integer" ? 1 : "any",
    description: prop.description ?? "",
  }));
}

/** Reads a form control's string back to the schema's type; "" means the default. */
export function coerceParam(control, raw) {
  if (control.kind === "boolean") return Boolean(raw);
  if (raw === "" || raw == null) return control.value;
  const value = Number(raw);
  return Number.isNaN(value) ? raw : value;
}

const URL_FIELDS = ["prompt", "policy", "seed", "temperature", "max_new_tokens"];

/** A setup as a query string a lecturer can share: params go in as `p.<name>`. */
export function encodeSetup(setup) {
  const query = new URLSearchParams();
  for (const key of URL_FIELDS) if (setup[key] != null && setup[key] !== "") query.set(key, String(setup[key]));
  for (const [name, value] of Object.entries(setup.params ?? {})) query.set(`p.${name}`, String(value));
  if (setup.trace) query.set("trace", setup.trace);
  return query.toString();
}

export function decodeSetup(search) {
  const query = new URLSearchParams(search);
  const setup = { params: {} };
  for (const key of URL_FIELDS) if (query.has(key)) setup[key] = query.get(key);
  for (const key of ["seed", "temperature", "max_new_tokens"]) {
    if (setup[key] != null && !Number.isNaN(Number(setup[key]))) setup[key] = Number(setup[key]);
  }
  for (const [key, value] of query) {
    if (!key.startsWith("p.")) continue;
    setup.params[key.slice(2)] = value === "true" ? true : value === "false" ? false : Number.isNaN(Number(value)) ? value : Number(value);
  }
  if (query.has("trace")) setup.trace = query.get("trace");
  return setup;
}
