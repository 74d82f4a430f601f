// Number, probability and token formatting, shared by every view. No DOM.

export const STATUSES = ["kept", "pruned", "accepted", "rejected", "recovered", "bonus"];

const VISIBLE_WHITESPACE = { " ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍" };

/**
 * A token's text with whitespace made visible, for node labels: " the\n" -> "␣the↵"; a chat
 * template's special token in brackets: "<|im_start|>" -> "⟨start⟩"; a token that is part of a
 * multi-byte character: "⟨bytes⟩".
 */
export function tokenLabel(text) {
  if (text === "" || text == null) return "∅";
  // A token that is only part of a multi-byte character (an emoji's first bytes) decodes to U+FFFD alone.
  if (/^\uFFFD+$/.test(text)) return "⟨bytes⟩";
  const special = /^<\|(.+)\|>$/.exec(text);
  if (special) return `⟨${special[1].replace(/^im_/, "")}⟩`;
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

/** A CSS shade class from the number of accepted drafts in a step: 0..8, 8 meaning 8 or more. */
export function shadeClass(accepted) {
  return accepted == null ? "shade-none" : `shade-${Math.min(8, Math.max(0, accepted))}`;
}
