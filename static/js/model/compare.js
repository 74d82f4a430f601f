// Comparing runs of the same setup. No DOM.

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
