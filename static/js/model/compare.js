// Comparing runs of the same setup: lock-step alignment, shared scales, the table that explains, and
// equality with ar in words. No DOM.

import { ownTimesSpeedup } from "./timesplit.js";
//
// Equality. Under greedy decoding every policy must emit exactly ar's tokens: the engine is lossless.
// In bf16 (or fp16) a tree forward and a one-token forward add the same numbers in another order, so
// where the target's two best tokens are nearly tied the rounding can pick the other one, and from
// there the texts part. That is a property of the arithmetic, not a bug, and the table says so in
// words. The evidence is the target's top-2 logit gap at the first differing output position: the
// version-2 verify event of the step that emitted that position carries the target's p over its top
// tokens at each node the acceptance walk visited (`walk[].top`), and log p₁ − log p₂ is the logit
// gap (softmax divides both by the same sum). The bench records the same gap (`top2_gap`, from
// ar's prefix).
//
// The near-tie bound. bf16 keeps 8 significant bits: a logit between 16 and 32 (where the top
// logits of a small LM lie) is rounded to a multiple of 0.125, and a whole network's rounding moves
// it by a few such steps. We call a gap up to 0.5 nats (four steps) a bf16 near-tie; fp16 (11 bits:
// steps of 1/64 there) 0.0625; fp32 0.001 (reduction order alone moves fp32 logits by ~1e-4).
// A larger gap is reported as "differs": that would be a bug.

export const NEAR_TIE_BOUND = { bfloat16: 0.5, float16: 0.0625, float32: 1e-3, float64: 1e-9 };

export const SHORT_DTYPE = { bfloat16: "bf16", float16: "fp16", float32: "fp32", float64: "fp64" };

export function nearTieBound(dtype) {
  return NEAR_TIE_BOUND[String(dtype ?? "").replace("torch.", "")] ?? NEAR_TIE_BOUND.float32;
}

/** The first output position (0-based) where two token lists differ; null where they are equal. */
export function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

/**
 * The target's top-2 logit gap at output position `position` (0-based) of a run, from the verify
 * event of the step that emitted it: log p₁ − log p₂ over the top tokens at the walk's node there.
 * null where the events carry no walk (schema 1, or detail off) or fewer than two top tokens.
 */
export function gapAt(events, position) {
  let before = 0;
  let stepNumber = null;
  for (const event of events) {
    if (event.type !== "step_metrics") continue;
    if (event.new_tokens > position) {
      stepNumber = event.step;
      break;
    }
    before = event.new_tokens;
  }
  if (stepNumber == null) return null;
  const verify = events.find((e) => e.type === "verify" && e.step === stepNumber);
  const node = verify?.accepted_path?.[position - before];
  const visit = verify?.walk?.find((w) => w.node === node);
  const top = [...(visit?.top ?? [])].map((t) => t.p).filter((p) => p > 0).sort((x, y) => y - x);
  return top.length >= 2 ? Math.log(top[0]) - Math.log(top[1]) : null;
}

/**
 * Equality of a run with ar, in words.
 * Returns { kind: "baseline" | "identical" | "near-tie" | "differs" | "unknown" | "sampled", text, position, gap }
 * (position 1-based in the text, as people count tokens).
 */
export function equality(run, ar, { dtype = null } = {}) {
  if (!ar) return { kind: "unknown", text: "no ar run to compare with", position: null, gap: null };
  if (run === ar) return { kind: "baseline", text: "the baseline", position: null, gap: null };
  const temperature = run.started?.temperature ?? 0;
  if (temperature > 0) {
    return { kind: "sampled", text: "sampled: same distribution as ar, not the same tokens", position: null, gap: null };
  }
  const at = firstDifference(run.tokens, ar.tokens);
  if (at == null) return { kind: "identical", text: "identical", position: null, gap: null };
  const gap = gapAt(run.events, at) ?? gapAt(ar.events, at);
  const type = dtype ?? run.started?.dtype;
  const name = SHORT_DTYPE[type] ?? type ?? "this dtype";
  const token = at + 1;
  if (gap == null) {
    return { kind: "unknown", position: token, gap,
             text: `differs from token ${token} (the trace records no top-2 gap to tell a near-tie)` };
  }
  if (gap <= nearTieBound(type)) {
    return { kind: "near-tie", position: token, gap,
             text: `same up to a ${name} near-tie at token ${token} (top-2 gap ${gap.toFixed(3)})` };
  }
  return { kind: "differs", position: token, gap,
           text: `differs at token ${token} (top-2 gap ${gap.toFixed(3)}, above the ${name} near-tie bound ${nearTieBound(type)})` };
}

// ---------------------------------------------------------------- one run, summarised for comparison

/**
 * What the compare view needs of one run's events: its tokens, steps and per-step shape.
 * `layers`: per step, the verified tree's width at each depth (depth 1 first); `accepted` per step.
 */
export function runFacts(events) {
  const started = events.find((e) => e.type === "run_started") ?? null;
  const finished = events.find((e) => e.type === "run_finished") ?? null;
  const metrics = events.filter((e) => e.type === "step_metrics");
  const layers = new Map();
  for (const event of events) {
    if (event.type !== "tree") continue;
    const widths = [];
    for (const node of event.nodes) if (node.depth > 0) widths[node.depth - 1] = (widths[node.depth - 1] ?? 0) + 1;
    layers.set(event.step, Array.from(widths, (w) => w ?? 0));
  }
  const tokens = finished?.tokens ?? events.filter((e) => e.type === "text").flatMap((e) => e.tokens);
  return {
    policy: started?.policy ?? events[0]?.policy ?? null,
    started, finished, events, tokens,
    steps: metrics.map((m) => ({ step: m.step, depth: m.depth, width: m.width, size: m.tree_size,
                                 accepted: m.accepted, emitted: m.emitted, layers: layers.get(m.step) ?? [] })),
  };
}

/**
 * How the step-shape charts' legends name the panes' runs: by policy, or "n: policy" (the pane's number,
 * as the table names it) where two panes ran the same policy. paneLabels(["a", "b", "a"]) -> ["1: a", "b", "3: a"]
 */
export function paneLabels(policies) {
  const repeated = (policy) => policies.filter((p) => p === policy).length > 1;
  return policies.map((policy, i) => (repeated(policy) ? `${i + 1}: ${policy}` : policy));
}

/** One y range per measure for every pane (and one x range: the longest run's steps). */
export function sharedScales(facts) {
  const all = facts.flatMap((f) => f.steps);
  const top = (key) => Math.max(1, ...all.map((s) => s[key]));
  return { steps: Math.max(1, ...facts.map((f) => f.steps.length)), depth: top("depth"), width: top("width"),
           size: top("size") };
}

/**
 * The table that explains, one row per run (the baseline's first where present: `baseline` names the
 * policy that drafts nothing, model/policies.js baselinePolicy):
 *   tokensPerS, speedup (ar = 1), tau, delta, c, meanTreeSize (draft nodes verified per step),
 *   acceptance (accepted drafts over drafted nodes verified), predictedR = τ / (1 + c·δ) (the speedup if
 *   verifying a tree cost one plain forward; δ = 0 needs no c), costAwareR = τ / (v + δ·c + o)
 *   from the run's own times and ar's (model/timesplit.js, as the formula panel computes it), equality with ar.
 */
export function tableRows(facts, { dtype = null, baseline = null } = {}) {
  const ar = facts.find((f) => f.policy === baseline && f.finished) ?? null;
  const ordered = ar ? [ar, ...facts.filter((f) => f !== ar)] : facts;
  return ordered.filter((f) => f.finished).map((f) => {
    const done = f.finished;
    const drafted = f.steps.reduce((a, s) => a + s.size, 0);
    const accepted = f.steps.reduce((a, s) => a + s.accepted, 0);
    return {
      label: f.label ?? f.policy, policy: f.policy,
      tokensPerS: done.tokens_per_s,
      speedup: f === ar ? 1 : ar && ar.finished.tokens_per_s > 0 ? done.tokens_per_s / ar.finished.tokens_per_s : null,
      tau: done.tau, delta: done.delta, c: done.c, steps: done.steps,
      meanTreeSize: f.steps.length ? drafted / f.steps.length : null,
      acceptance: drafted ? accepted / drafted : null,
      predictedR: predictedSpeedup(done.tau, done.delta, done.c),
      costAwareR: ownTimesSpeedup(f.events, { arEvents: ar?.events, costs: f.started?.costs }).R,
      equality: equality(f, ar, { dtype }),
    };
  });
}

/**
 * R = τ / (1 + c·δ): tokens per step over the step's cost in target forwards, when verifying the
 * whole tree costs one plain forward. predictedSpeedup(3, 5, 0.04) -> 2.5; with δ = 0, R = τ.
 */
export function predictedSpeedup(tau, delta, c) {
  if (tau == null || delta == null) return null;
  if (delta === 0) return tau;
  return c == null ? null : tau / (1 + c * delta);
}

// ---------------------------------------------------------------- lock-step

/**
 * A PlayerGroup align function (player.js): the follower shows the step that emitted the output
 * token the leader's step starts at, at the same kind of phase.
 */
export function alignByTokens(position, leader, follower) {
  const token = leader.emittedBefore(position.stepIndex);
  return { ...position, stepIndex: follower.stepAtToken(token) };
}

/** The pane that leads a group: the one with most steps, so the shared slider reaches every step. */
export function leaderIndex(facts) {
  let best = 0;
  facts.forEach((f, i) => {
    if (f.steps.length > facts[best].steps.length) best = i;
  });
  return best;
}
