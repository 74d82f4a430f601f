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

/**
 * The text of a run of tokens that are each part of a UTF-8 character, from their raw bytes (the
 * events' byte_hex, earliest first): the characters they spell where the bytes end on a whole one,
 * else null (the character goes on past the last token).
 *
 * decodeByteRun(["20f09f", "8c", "8a"]) -> " 🌊"; decodeByteRun(["20f09f", "8c"]) -> null
 */
export function decodeByteRun(hexes) {
  const bytes = Uint8Array.from(hexes.join("").match(/../g) ?? [], (pair) => parseInt(pair, 16));
  const text = new TextDecoder("utf-8").decode(bytes);
  return text.includes("\uFFFD") ? null : text;
}

/** A partial token's own bytes, for a label (thin spaces, which labels keep as they are): "f09f" -> "⟨f0 9f⟩". */
export function bytesLabel(hex) {
  return `⟨${(hex.match(/../g) ?? []).join("\u2009")}⟩`;
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
