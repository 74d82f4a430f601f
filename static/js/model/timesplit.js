// Where a run's time went and the speedup its own times predict. Each step_metrics event carries
// the step's split (engine/timing.py): drafting (drafter and policy, of which draft_forward_ms inside
// the drafter's model forwards), the target's verify forward over the tree, and the rest
// (acceptance, cache compaction, events). No DOM.

/** The parts of a step's wall time, in the order the stacked bars draw them. */
export const TIME_PARTS = ["draft", "verify", "other"];

/**
 * Per step: { step, draft, verify, other, total } in ms, plus draftForwardMs, draftForwards and
 * treeTokens (the tree's nodes and its root: the n of verify(n)).
 *
 * stepTimes([{ type: "step_metrics", step: 1, draft_ms: 2, verify_ms: 5, other_ms: 1, draft_forward_ms: 1.5,
 *              draft_forwards: 3, tree_size: 4 }])
 *   -> [{ step: 1, draft: 2, verify: 5, other: 1, total: 8, draftForwardMs: 1.5, draftForwards: 3, treeTokens: 5 }]
 */
export function stepTimes(events) {
  return events.filter((e) => e.type === "step_metrics").map((m) => ({
    step: m.step, draft: m.draft_ms ?? 0, verify: m.verify_ms ?? 0, other: m.other_ms ?? 0,
    total: (m.draft_ms ?? 0) + (m.verify_ms ?? 0) + (m.other_ms ?? 0),
    draftForwardMs: m.draft_forward_ms ?? 0, draftForwards: m.draft_forwards ?? 0, treeTokens: (m.tree_size ?? 0) + 1,
    shared: m.shared ?? 1,
  }));
}

/**
 * What the page says when a server batched this run with others' (step_metrics.shared > 1), else null:
 * its verify times are then the shared forward's, over every request's tree.
 *
 * sharedNote([{ shared: 1 }, { shared: 3 }, { shared: 2 }])
 *   -> "2 of 3 steps were verified in one forward with other runs' trees (up to 3 requests): their verify times are the shared forward's."
 */
export function sharedNote(times) {
  const shared = times.filter((t) => t.shared > 1);
  if (!shared.length) return null;
  const most = Math.max(...shared.map((t) => t.shared));
  return `${shared.length} of ${times.length} steps were verified in one forward with other runs' trees (up to ${most} requests): `
    + "their verify times are the shared forward's.";
}

/**
 * The run's totals: { draft, verify, other, total, steps, share: { draft, verify, other } } (share of
 * the steps' time, 0…1); null before the first step. Prefill is not a step and is left out.
 */
export function timeTotals(times) {
  if (!times.length) return null;
  const sum = (key) => times.reduce((s, t) => s + t[key], 0);
  const totals = { draft: sum("draft"), verify: sum("verify"), other: sum("other"), steps: times.length };
  totals.total = totals.draft + totals.verify + totals.other;
  totals.share = Object.fromEntries(TIME_PARTS.map((part) => [part, totals.total > 0 ? totals[part] / totals.total : 0]));
  return totals;
}

/**
 * The cost-aware speedup over plain decoding. Each step emits τ tokens and costs one verify of the
 * tree, verify(n), δ draft forwards, and the time outside model forwards (the policy's drafting work,
 * acceptance, cache compaction, events); plain decoding's step costs verify(1) and its own time
 * outside. In units of plain decoding's step t₁ = verify(1) + its outside time:
 *   R = τ / (v + δ·c + o), v = verify(n)/t₁, c = one draft forward/t₁, o = outside time/t₁.
 * With no outside time on either side this is τ / (verify(n)/verify(1) + δ·c). δ = 0 needs no c.
 *
 * costAwareSpeedup({ tau: 3, delta: 4, verifyMs: 60, draftForwardMs: 2, oneTokenMs: 40 }) -> 3 / (1.5 + 4 × 0.05) = 1.7647…
 * costAwareSpeedup({ tau: 3, delta: 4, verifyMs: 60, draftForwardMs: 2, outsideMs: 6, oneTokenMs: 38, plainOutsideMs: 2 })
 *   -> 3 / ((60 + 8 + 6) / 40) = 1.6216…
 */
export function costAwareSpeedup({ tau, delta, verifyMs, draftForwardMs, outsideMs = 0, oneTokenMs, plainOutsideMs = 0 }) {
  if (tau == null || delta == null || verifyMs == null || !(oneTokenMs > 0)) return null;
  if (delta > 0 && draftForwardMs == null) return null;
  const plainStep = oneTokenMs + plainOutsideMs;
  return tau / ((verifyMs + (delta > 0 ? delta * draftForwardMs : 0) + outsideMs) / plainStep);
}

/**
 * verify(1), the time of one target forward of one token: plain decoding's mean verify per step in
 * a run of the same setup (its events, or its run_finished, whose timings are the run's totals), with
 * its mean time outside the forward per step ({ ms, source, outsideMs }); else the cost table's
 * one-token forward at the prompt's context ({ ms, source }: the time outside unknown, taken as 0);
 * else null.
 */
export function oneTokenForward({ arEvents = null, arFinished = null, costs = null } = {}) {
  const ar = arEvents ? stepTimes(arEvents) : [];
  if (ar.length) {
    return { ms: ar.reduce((s, t) => s + t.verify, 0) / ar.length, source: "plain decoding's run",
             outsideMs: ar.reduce((s, t) => s + t.draft + t.other, 0) / ar.length };
  }
  if (arFinished?.steps > 0 && arFinished.verify_ms > 0) {
    return { ms: arFinished.verify_ms / arFinished.steps, source: "plain decoding's run",
             outsideMs: ((arFinished.draft_ms ?? 0) + (arFinished.other_ms ?? 0)) / arFinished.steps };
  }
  const at = costs?.ns?.indexOf(1) ?? -1;
  if (at >= 0 && costs.target_ms[at] > 0) return { ms: costs.target_ms[at], source: `cost table (${costs.source})` };
  return null;
}

/**
 * The run's own times behind R: τ and δ over the steps so far, verify(n) its mean verify per step,
 * one draft forward's mean time, its mean time outside model forwards per step, plain decoding's step
 * (oneTokenForward) and R = costAwareSpeedup of them. Returns { R, tau, delta, verifyMs, draftForwardMs,
 * outsideMs, verifyRatio, c, o, plainStepMs, oneToken, steps }, the ratios over plain decoding's step;
 * R is null where verify(1) is unknown or no step has finished.
 */
export function ownTimesSpeedup(events, { arEvents = null, arFinished = null, costs = null } = {}) {
  const metrics = events.filter((e) => e.type === "step_metrics");
  const times = stepTimes(metrics);
  const oneToken = oneTokenForward({ arEvents, arFinished, costs });
  const steps = times.length;
  if (!steps) return { R: null, steps, oneToken };
  const tau = metrics.reduce((s, m) => s + m.emitted, 0) / steps;
  const forwards = times.reduce((s, t) => s + t.draftForwards, 0);
  const delta = forwards / steps;
  const verifyMs = times.reduce((s, t) => s + t.verify, 0) / steps;
  const draftForwardMs = forwards ? times.reduce((s, t) => s + t.draftForwardMs, 0) / forwards : null;
  const outsideMs = times.reduce((s, t) => s + t.draft - t.draftForwardMs + t.other, 0) / steps;
  const plainOutsideMs = oneToken?.outsideMs ?? 0;
  const R = costAwareSpeedup({ tau, delta, verifyMs, draftForwardMs, outsideMs, oneTokenMs: oneToken?.ms, plainOutsideMs });
  const plainStepMs = oneToken ? oneToken.ms + plainOutsideMs : null;
  return {
    R, tau, delta, verifyMs, draftForwardMs, outsideMs, steps, oneToken, plainStepMs,
    verifyRatio: plainStepMs ? verifyMs / plainStepMs : null,
    c: plainStepMs && draftForwardMs != null ? draftForwardMs / plainStepMs : null,
    o: plainStepMs ? outsideMs / plainStepMs : null,
  };
}
