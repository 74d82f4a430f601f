// Replay control: step keys move between step ends, reset goes to the start, live events follow.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Player } from "../../static/js/player.js";

const header = { schema_version: 1, run_id: "r", policy: "ar" };
const events = [
  { ...header, type: "run_started" },
  { ...header, type: "tree", step: 1 }, { ...header, type: "verify", step: 1 },
  { ...header, type: "tree", step: 2 }, { ...header, type: "verify", step: 2 },
  { ...header, type: "run_finished" },
];

test("arrows_move_between_step_ends_and_reset_returns_to_the_start", () => {
  const player = new Player(() => {});
  player.load([...events], { follow: false });
  assert.equal(player.cursor, 0);
  player.forward();
  assert.equal(player.cursor, 3);
  player.forward();
  assert.equal(player.cursor, 5);
  player.forward();
  assert.equal(player.cursor, 6, "past the last step: the run's end");
  player.back();
  assert.equal(player.cursor, 5);
  player.back();
  assert.equal(player.cursor, 3);
  player.reset();
  assert.equal(player.cursor, 0);
  assert.equal(player.playing, false);
});

test("live_events_advance_the_cursor_only_while_following", () => {
  const player = new Player(() => {});
  player.load([], { follow: true });
  events.slice(0, 3).forEach((e) => player.push(e));
  assert.equal(player.cursor, 3);
  player.back();
  player.push(events[3]);
  assert.equal(player.cursor, 0, "looking back at an earlier step stays there");
  player.seekStep(1);
  assert.equal(player.cursor, 4);
});

test("play_walks_the_events_one_by_one_then_stops_at_the_end", async () => {
  const player = new Player(() => {});
  player.speed = 1000;
  player.load([...events], { follow: false });
  player.toggle();
  assert.equal(player.playing, true);
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(player.cursor, events.length);
  assert.equal(player.playing, false);
});
