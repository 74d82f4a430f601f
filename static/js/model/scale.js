// Axes for charts: round ticks and linear or log₂ maps from values to pixels. No DOM.

/**
 * Round tick values covering [low, high]: steps of 1, 2 or 5 × 10^k (tools/plots.py nice_ticks, same rule).
 * niceTicks(0, 1.32) -> [0, 0.5, 1, 1.5]; niceTicks(0, 7) -> [0, 2, 4, 6, 8].
 */
export function niceTicks(low, high, count = 5) {
  if (!(high > low)) high = low + 1;
  const raw = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const ticks = [];
  let value = Math.floor(low / step) * step;
  while (value < high + step * 1e-9) {
    ticks.push(round(value));
    value += step;
  }
  if (ticks[ticks.length - 1] < high - 1e-9) ticks.push(round(value));
  return ticks;
}

const round = (value) => Math.round(value * 1e10) / 1e10;

/** The top of a y axis that holds `values`: the last round tick at or above their maximum (at least `floor`). */
export function niceMax(values, floor = 1) {
  const top = Math.max(floor, ...values.filter((v) => v != null && Number.isFinite(v)));
  const ticks = niceTicks(0, top);
  return ticks[ticks.length - 1];
}

/** Maps [low, high] onto [start, end]; end < start draws a y axis upwards. */
export function linear(low, high, start, end) {
  const span = high - low || 1;
  const scale = (value) => start + ((value - low) / span) * (end - start);
  return Object.assign(scale, { low, high, start, end });
}

export function log2(low, high, start, end) {
  const span = Math.log2(high / low) || 1;
  const scale = (value) => start + (Math.log2(value / low) / span) * (end - start);
  return Object.assign(scale, { low, high, start, end });
}

/** Ticks of a log₂ axis over measured values: the powers of two among them, and the last (every n from 1 to
 *  64 would print 64 labels on top of each other). */
export function log2Ticks(values) {
  const last = Math.max(...values);
  return values.filter((v) => Number.isInteger(Math.log2(v)) || v === last);
}

/** Numbers for tick labels: short, no trailing zeros. */
export function tickText(value) {
  return String(Math.round(value * 100) / 100);
}

/** The top of a y axis for counts up to `max`: the count itself when small, else a round number above it. */
export function axisTop(max, count = 4) {
  if (max <= count) return Math.max(1, Math.ceil(max));
  const ticks = niceTicks(0, max, count);
  return ticks[ticks.length - 1];
}
