// The theory behind a step, computed from the run's own events: the tree-attention mask and position
// ids of the verified tree (as engine/tree.py builds them), the KV cache before and after the commit,
// the acceptance walk's numbers, and the formulas: the acceptance rate α, Leviathan's expected tokens
// per step, and the predicted speedup R = τ / (1 + c·δ), refined by the cost of verifying a tree. No DOM.

import { stepEvent, walkNodes } from "./phases.js";
import { symbolParam, symbolValue } from "./policies.js";
import { ownTimesSpeedup } from "./timesplit.js";

// ---------------------------------------------------------------- the verified tree

/** The verified tree of a step as flat arrays (index 0 the root): parent, depth, token text. */
export function verifiedTree(events, phase) {
  const tree = stepEvent(events, phase, "tree");
  if (tree) {
    return { parent: tree.nodes.map((n) => n.parent), depth: tree.nodes.map((n) => n.depth),
             text: tree.nodes.map((n) => n.text) };
  }
  // Plain decoding and runs without detail: the root alone.
  return { parent: [-1], depth: [0], text: [""] };
}

/**
 * [T][T] 0/1: entry (i, j) is 1 iff j is i or one of its ancestors (engine/tree.py ancestor_matrix).
 *
 * ancestorMatrix([-1, 0, 0, 1]) -> [[1,0,0,0], [1,1,0,0], [1,0,1,0], [1,1,0,1]]
 */
export function ancestorMatrix(parent) {
  return parent.map((_, i) => {
    const row = new Array(parent.length).fill(0);
    for (let j = i; j !== -1; j = parent[j]) row[j] = 1;
    return row;
  });
}

/**
 * [T][P + T] 0/1: every node sees the whole prefix, its ancestors and itself (tree_attention_allowed).
 *
 * attentionMask([-1, 0, 0], 2) -> [[1,1,1,0,0], [1,1,1,1,0], [1,1,1,0,1]]
 */
export function attentionMask(parent, prefixLen) {
  const prefix = new Array(prefixLen).fill(1);
  return ancestorMatrix(parent).map((row) => prefix.concat(row));
}

/** Position ids: prefix length + depth (engine/tree.py position_ids). positionIds([0, 1, 1, 2], 10) -> [10, 11, 11, 12] */
export function positionIds(depth, prefixLen) {
  return depth.map((d) => prefixLen + d);
}

/** The node and its ancestors, root last. */
export function ancestorsOf(parent, node) {
  const chain = [];
  for (let j = node; j !== -1 && j != null; j = parent[j]) chain.push(j);
  return chain;
}

// ---------------------------------------------------------------- KV cache

/**
 * The target's cache around one step: `prefix` rows before verify, one row per tree node during
 * verify (root first), and after the commit the prefix plus the root and the accepted path.
 * Rows: { post, depth, fate: "kept" | "dropped" } in tree order.
 */
export function kvCache(events, phase, prefixLen) {
  const tree = verifiedTree(events, phase);
  const verify = stepEvent(events, phase, "verify");
  const kept = new Set(verify ? verify.accepted_path : [0]);
  const rows = tree.parent.map((_, post) => ({ post, depth: tree.depth[post], text: tree.text[post],
                                               fate: kept.has(post) ? "kept" : "dropped" }));
  return { prefix: prefixLen, rows, kept: kept.size, dropped: rows.length - kept.size, after: prefixLen + kept.size };
}

// ---------------------------------------------------------------- the acceptance walk

/**
 * What the sampling panel shows at an accept phase: the node the walk stands on, the target's p and
 * the draft's q over the top tokens, each child tried (rule, ratio, u, outcome), and on rejection of
 * all, the residual and the token drawn. From the verify event's `walk` (schema 2); a version-1
 * event gives the tried children's p and q only (`partial`). `ended`: the text ends at this node
 * (EOS or max_new_tokens at an accepted draft, schema 3), so nothing is tried or drawn after it.
 */
export function walkStep(verify, walked, parent = null) {
  const walk = walkNodes(verify);
  const index = Math.max(0, Math.min(walked, walk.length) - 1);
  const post = walk[index];
  const last = index === walk.length - 1;
  const entry = verify.walk?.[index];
  const emitted = last ? verify.emitted ?? null : null;
  const ended = last && !verify.emitted;
  if (entry) {
    return { node: post, top: entry.top, checks: entry.checks, residual: entry.residual_top ?? null,
             drawn: entry.drawn ?? null, emitted, ended, partial: false };
  }
  // Version 1: the children of the walked node that acceptance tried, best q first as it tries them.
  const children = verify.nodes.filter((v) => v.verdict !== "unreached" && (parent == null || parent[v.node] === post))
    .sort((a, b) => b.q - a.q);
  return { node: post, top: null, checks: children.map((v) => ({ child: v.node, token: v.token, rule: null, p: v.p, q: v.q,
                                                                   ratio: null, u: null, accepted: v.verdict === "accepted" })),
           residual: null, drawn: emitted?.token ?? null, emitted, ended, partial: true };
}

// ---------------------------------------------------------------- formulas

/**
 * The measured acceptance rate α: of the drafted positions the walk tried along its path, the share
 * accepted. Each step accepts `accepted` positions and, unless it reached a leaf (bonus), rejects one;
 * α = Σ accepted / (Σ accepted + rejecting steps). For a chain this estimates Leviathan's α.
 */
export function acceptanceRate(events) {
  let accepted = 0;
  let stops = 0;
  for (const event of events) {
    if (event.type !== "verify" || !event.nodes.length) continue;
    accepted += event.accepted_path.length - 1;
    if (event.emitted?.kind === "recovered") stops += 1;
  }
  return accepted + stops ? accepted / (accepted + stops) : null;
}

/**
 * Leviathan et al.'s expected tokens per step of a chain of γ drafts accepted each with probability α:
 * (1 − α^(γ+1)) / (1 − α); γ + 1 when α = 1.
 *
 * leviathanTau(0.8, 4) -> 3.3616
 */
export function leviathanTau(alpha, gamma) {
  if (alpha == null || gamma == null) return null;
  if (alpha >= 1) return gamma + 1;
  return (1 - alpha ** (gamma + 1)) / (1 - alpha);
}

/**
 * Predicted speedup over plain decoding: τ tokens per step, each step costing one verify forward
 * (`verifyCost` of them: 1 when verifying a tree costs as much as one token) plus δ draft forwards
 * at c each. R = τ / (verifyCost + c·δ).
 *
 * predictedSpeedup(3, 0.05, 4) -> 2.5
 */
export function predictedSpeedup(tau, c, delta, verifyCost = 1) {
  if (tau == null || delta == null) return null;
  if (delta === 0) return tau / verifyCost; // nothing drafted: no c needed
  if (c == null) return null;
  return tau / (verifyCost + c * delta);
}

/**
 * The τ a step must beat to pay: R = τ / (v + c·δ) > 1 exactly when τ > v + c·δ. However good the drafts,
 * a tree whose verify costs v one-token forwards, drafted in δ forwards of c each, loses to plain decoding
 * until it accepts more than that many tokens a step (with v = 1 and no drafting, any τ > 1 pays).
 *
 * breakEvenTau(2.8, 0.03, 4) -> 2.92
 */
export function breakEvenTau(verifyCost, c, delta) {
  if (verifyCost == null || delta == null) return null;
  if (delta === 0) return verifyCost;
  if (c == null) return null;
  return verifyCost + c * delta;
}

/**
 * The engine's time for one target forward of `n` new tokens, as the run's opening event lists it
 * (run_started.costs: { source, context, ns, target_ms }, engine/engine.py costs_summary): the engine's
 * own lookup of its table at every measured n, so the page only picks the entry that prices n, the first
 * listed n ≥ n (the engine reads an unmeasured n at the next measured one). null past the last listed n:
 * the engine's rule there is its own to apply, not the page's.
 *
 * tableCost({ ns: [1, 2, 4], target_ms: [10, 12, 20] }, 3) -> 20
 */
export function tableCost(costs, n) {
  if (n <= 0) return 0;
  const k = costs.ns.findIndex((listed) => listed >= n);
  return k === -1 ? null : costs.target_ms[k];
}

/**
 * How many one-token forwards verifying a tree of `treeTokens` costs: from the cost table the run
 * reports (its source: measured, synthetic or assumed) where it lists that size, else measured from the run's own verify
 * time over plain decoding's (when a plain decoding run of the same setup is at hand), else null.
 */
export function verifyCost({ costs = null, treeTokens, stepVerifyMs = null, arVerifyMs = null }) {
  if (costs?.ns?.length) {
    const [one, tree] = [tableCost(costs, 1), tableCost(costs, treeTokens)];
    if (one > 0 && tree != null) return { ratio: tree / one, source: `cost table (${costs.source})` };
  }
  if (stepVerifyMs != null && arVerifyMs > 0) return { ratio: stepVerifyMs / arVerifyMs, source: "measured" };
  return null;
}

/** Mean verify ms per step of a run's events (plain decoding: the time of a one-token forward). */
export function meanVerifyMs(events) {
  const metrics = events.filter((e) => e.type === "step_metrics");
  return metrics.length ? metrics.reduce((s, m) => s + m.verify_ms, 0) / metrics.length : null;
}

/**
 * c as the engine's run summary computes it (engine/reporting.py), over the steps so far: one draft
 * forward's mean time over the mean verify per step; null before any draft forward.
 */
export function cSoFar(metrics) {
  const forwards = metrics.reduce((s, m) => s + m.draft_forwards, 0);
  const verify = metrics.reduce((s, m) => s + m.verify_ms, 0);
  if (!forwards || !(verify > 0)) return null;
  return (metrics.reduce((s, m) => s + m.draft_forward_ms, 0) / forwards) / (verify / metrics.length);
}

/**
 * The formula panel's numbers at a phase: α so far, τ, δ, c, Leviathan's τ for a chain, predicted R
 * (ideal and with the tree's verify cost), the measured speedup where plain decoding's speed is known.
 * `policies`: the served policies (/api/policies), which say which parameter is a chain's γ.
 */
export function formulaNumbers(events, phase, { arFinished = null, arEvents = null, policies = {} } = {}) {
  const upTo = events.slice(0, phase?.end ?? events.length);
  const started = events.find((e) => e.type === "run_started") ?? {};
  const finished = events.find((e) => e.type === "run_finished") ?? null;
  const metrics = upTo.filter((e) => e.type === "step_metrics");
  const steps = metrics.length;
  const tau = finished && upTo.includes(finished) ? finished.tau : steps ? metrics.reduce((s, m) => s + m.emitted, 0) / steps : null;
  const delta = finished && upTo.includes(finished) ? finished.delta
    : steps ? metrics.reduce((s, m) => s + m.draft_forwards, 0) / steps : null;
  const c = finished && upTo.includes(finished) ? finished.c : cSoFar(metrics);
  const alpha = acceptanceRate(upTo);
  // Leviathan's formula is a chain's: the policy whose parameters include the paper's γ (served). A chain
  // that picks its γ each step reports every change (policy_adjusted): the formula reads the γ of the phase.
  const gammaParam = symbolParam(policies, started.policy, "γ");
  const gammaMoves = upTo.filter((e) => e.type === "policy_adjusted" && e.param === gammaParam);
  const gamma = gammaMoves.length ? gammaMoves.at(-1).new : symbolValue(policies, started.policy, "γ", started.params);
  const step = metrics.find((m) => m.step === phase?.step) ?? null;
  // Before this step's metrics arrive (draft to accept), its tree's size is known once the tree is final.
  const tree = step ? null : stepEvent(events, phase, "tree");
  const treeTokens = step ? step.tree_size + 1 : tree ? tree.nodes.length : null;
  const costs = started.costs ?? null;
  const arVerifyMs = arEvents ? meanVerifyMs(arEvents) : null;
  const cost = treeTokens == null ? null : verifyCost({ costs, treeTokens, stepVerifyMs: step?.verify_ms ?? null, arVerifyMs });
  const meanTree = steps ? metrics.reduce((s, m) => s + m.tree_size, 0) / steps : null;
  const runCost = steps ? verifyCost({ costs, treeTokens: meanTree + 1, stepVerifyMs: meanVerifyMs(upTo), arVerifyMs }) : null;
  return {
    alpha, tau, delta, c, gamma, steps,
    leviathan: leviathanTau(alpha, gamma),
    predicted: predictedSpeedup(tau, c, delta),
    predictedWithCost: runCost ? predictedSpeedup(tau, c, delta, runCost.ratio) : null,
    breakEven: runCost ? breakEvenTau(runCost.ratio, c, delta) : null,
    runVerifyCost: runCost,
    stepVerifyCost: cost,
    treeTokens,
    treeFinal: Boolean(step || tree),
    own: ownTimesSpeedup(upTo, { arEvents, arFinished, costs }),
    measured: finished && arFinished?.tokens_per_s > 0 ? finished.tokens_per_s / arFinished.tokens_per_s : null,
  };
}
