// budgetd dashboard: plain JavaScript, no dependencies, served from the
// binary. Every value that comes from the API is put into the page as text
// (textContent, attribute values), never parsed as HTML.
"use strict";

// A bucket's page is cheap to read and polls often; listing buckets costs
// more (on Redis a page scans the keyspace), so list pages poll less often
// and bucket counts are kept for a while.
const POLL_MS = { bucket: 2000, limit: 5000, limits: 5000 };
const COUNT_TTL_MS = 30000;
const TOKEN_KEY = "budgetd.token";
const SCALE = 12; // fractional digits of a level, as in package bucket
const ONE = 10n ** BigInt(SCALE);

// ---- state -------------------------------------------------------------

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let timer = null;
let busy = false;
let view = null; // {page, name, key}
let cursors = [""]; // cursor of each page of a limit's buckets seen so far
let pageIndex = 0;
const counts = new Map(); // limit name → {text, title, at, pending}

// ---- DOM helpers -------------------------------------------------------

const $ = (id) => document.getElementById(id);

// el builds an element; children are nodes or strings (added as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function setStatus(text) { $("status").textContent = text; }

// ---- API ----------------------------------------------------------------

class AuthError extends Error {}

async function api(path) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const res = await fetch(path, { headers, cache: "no-store" });
  if (res.status === 401) throw new AuthError(token ? "rejected" : "missing");
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    const p = body || {};
    const err = new Error((p.title || "HTTP " + res.status) + (p.detail ? ": " + p.detail : ""));
    err.status = res.status;
    throw err;
  }
  return body;
}

const enc = encodeURIComponent;
const limitPath = (name) => "/v1/limits/" + enc(name);
const bucketPath = (name, key) => limitPath(name) + "/buckets/" + enc(key);

// ---- exact decimals (BigInt in units of 10^-12) ---------------------------

function toUnits(s) {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(s));
  if (!m) return 0n;
  const frac = (m[3] || "").slice(0, SCALE).padEnd(SCALE, "0");
  const v = BigInt(m[2]) * ONE + BigInt(frac);
  return m[1] ? -v : v;
}

function fromUnits(u) {
  const neg = u < 0n;
  if (neg) u = -u;
  const int = u / ONE;
  let frac = (u % ONE).toString().padStart(SCALE, "0").replace(/0+$/, "");
  return (neg ? "-" : "") + int.toString() + (frac ? "." + frac : "");
}

const unitsToNumber = (u) => Number(u) / 1e12;

// fmtAmount writes a decimal string from the API with at most digits
// fractional digits, rounded half up on the string itself (never through a
// float), without trailing zeros: "3.333333333334" → "3.33".
function fmtAmount(s, digits) {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(s));
  if (!m) return String(s);
  let frac = m[3] || "";
  if (frac.length <= digits) return String(s);
  let v = BigInt(m[2] + frac.slice(0, digits));
  if (frac.charCodeAt(digits) >= 53) v += 1n; // next digit ≥ 5
  let t = v.toString().padStart(digits + 1, "0");
  let int = t.slice(0, t.length - digits), f = t.slice(t.length - digits).replace(/0+$/, "");
  return m[1] + int + (f ? "." + f : "");
}

// amountDigits is how many fractional digits the amounts of a limit need:
// those of its capacity, and at least 2.
function amountDigits(capacity) {
  const m = /\.(\d+)$/.exec(String(capacity));
  return Math.max(2, m ? m[1].length : 0);
}

// ---- the viewer's own formats (Intl), exact -------------------------------

// Amounts are decimal strings of up to 13 integer and 12 fractional digits,
// more than a float holds, so they never pass through one: the integer part
// is formatted as a BigInt (exact), the fractional digits one by one, with
// the locale's decimal separator, between. The sign goes where the locale
// puts it.
const NF = new Intl.NumberFormat();
const DECIMAL_SEP = (new Intl.NumberFormat(undefined, { minimumFractionDigits: 1 }).formatToParts(0.5)
  .find((p) => p.type === "decimal") || { value: "." }).value;
const DIGITS = Array.from({ length: 10 }, (_, i) => NF.format(i));

// localDecimal writes the decimal string s in the viewer's number format,
// digit for digit: "1234567.125" → "1,234,567.125" (en-US), "1.234.567,125"
// (de-DE). A string that is not a plain decimal is returned as it is.
function localDecimal(s) {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(s));
  if (!m) return String(s);
  const int = NF.format(BigInt(m[2]));
  const frac = m[3] ? DECIMAL_SEP + [...m[3]].map((d) => DIGITS[+d]).join("") : "";
  return NF.formatToParts(m[1] ? -1n : 1n).map((p) => (p.type === "integer" ? int + frac : p.value)).join("");
}

// showAmount is fmtAmount in the viewer's format: what the page shows of an
// amount (the exact value goes in the title).
const showAmount = (s, digits) => localDecimal(fmtAmount(s, digits));

// showPercent writes the ratio a/b (units, b > 0) as a percentage with one
// fractional digit, rounded half up in BigInt, in the viewer's format.
function showPercent(a, b) {
  const tenths = (a * 2000n / b + 1n) / 2n; // per mille, rounded half up
  return new Intl.NumberFormat(undefined, { style: "percent", minimumFractionDigits: 1, maximumFractionDigits: 1 })
    .format(fromUnits(tenths * ONE / 1000n));
}

// API times are RFC 3339 with six fractional digits, in UTC.
const msOf = (iso) => Date.parse(String(iso).replace(/(\.\d{3})\d*Z$/, "$1Z"));

// usOf is an API time in microseconds since 1970, exactly, as a BigInt.
function usOf(iso) {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z$/.exec(String(iso));
  if (!m) return BigInt(msOf(iso)) * 1000n;
  return BigInt(Date.parse(m[1] + "Z")) * 1000n + BigInt((m[2] || "").padEnd(6, "0"));
}

// VIEWER_ZONE is the browser's own time zone, as Intl reports it.
const VIEWER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
const WHEN = { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
const zoneFormats = new Map();
// inZone is the format of a time in zone tz (undefined: the viewer's, with
// its short name), to the minute or, with seconds, to the second.
function inZone(tz, seconds) {
  const k = (tz || "") + (seconds ? " s" : "");
  if (!zoneFormats.has(k)) {
    zoneFormats.set(k, new Intl.DateTimeFormat(undefined, { ...WHEN, ...(seconds ? { second: "2-digit" } : {}),
      ...(tz ? { timeZone: tz } : { timeZoneName: "short" }) }));
  }
  return zoneFormats.get(k);
}

// zonedParts writes an API time in the viewer's zone and, when the limit
// has a zone tz of its own, in that zone (null otherwise).
function zonedParts(iso, tz, seconds) {
  const d = new Date(msOf(iso));
  let limit = null;
  if (tz && tz !== VIEWER_ZONE) {
    try {
      const there = inZone(tz, seconds).format(d);
      limit = there === inZone(VIEWER_ZONE, seconds).format(d) ? "the same in " + tz : there + " " + tz;
    } catch (e) { limit = tz; }
  }
  return { viewer: inZone(undefined, seconds).format(d), limit };
}

// zonedTime shows an API time in the viewer's zone and, beside it, in the
// limit's zone tz: "Apr 30, 2026, 06:00 PM EDT · May 1, 2026, 12:00 AM
// Europe/Berlin". The exact time is in the title and the datetime attribute.
// Every time the page shows is written so: to the minute for period
// boundaries, with seconds (seconds true) for the times of events.
function zonedTime(iso, tz, seconds) {
  const p = zonedParts(iso, tz, seconds);
  const viewer = el("time", { datetime: iso, class: "viewer", "data-zone": VIEWER_ZONE }, p.viewer);
  const limit = p.limit === null ? null : el("span", { class: "limit-zone", "data-zone": tz }, p.limit);
  return el("span", { class: "when", title: iso }, viewer, limit ? " · " : null, limit);
}

// zonedText is zonedTime as plain text, for a chart's tooltip.
function zonedText(iso, tz, seconds) {
  const p = zonedParts(iso, tz, seconds);
  return p.viewer + (p.limit === null ? "" : " · " + p.limit);
}

// eventTime is zonedTime to the second of a time that may be absent
// (null: "never").
function eventTime(iso, tz) { return iso ? zonedTime(iso, tz, true) : "never"; }

// countdownText writes a span of ms as days, hours and minutes in the viewer's
// unit formats ("20d 10h 0m" in en-US), with seconds under an hour, rounded
// down; "now" at zero or below.
const UNITS = ["day", "hour", "minute", "second"].map((unit) => new Intl.NumberFormat(undefined, { style: "unit", unit, unitDisplay: "narrow" }));
function countdownText(ms) {
  if (!(ms > 0)) return "now";
  const s = Math.floor(ms / 1000);
  const parts = [Math.floor(s / 86400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60, s % 60];
  const first = parts.findIndex((v) => v > 0);
  const shown = s >= 3600 ? [0, 1, 2] : [1, 2, 3];
  return shown.filter((i) => i >= Math.min(first, 2)).map((i) => UNITS[i].format(parts[i])).join(" ");
}

// fmtTime writes an API time in UTC, to the millisecond: the level chart's
// tooltips, whose time axis is in UTC.
function fmtTime(iso) {
  if (!iso) return "never";
  return iso.replace("T", " ").replace(/(\.\d{3})\d*Z$/, "$1Z");
}

// ---- the level over time --------------------------------------------------

// The plot draws the series budgetd computes (GET …/levels): the level is
// linear between its points, so a line through them is the level. Nothing
// of the bucket rule is computed here.

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const S = 1000, MIN = 60 * S, HOUR = 60 * MIN, DAY = 24 * HOUR;
const STEPS = [S, 2 * S, 5 * S, 10 * S, 15 * S, 30 * S, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN,
  HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY];

// timeTicks are the ticks of a time axis from t0 to t1 (ms), in UTC: at most
// about eight, on whole seconds, minutes, hours or days (weeks from Monday),
// labelled with the date at midnight and the time of day otherwise.
function timeTicks(t0, t1) {
  const span = Math.max(t1 - t0, S);
  const step = STEPS.find((st) => span / st <= 8) || 28 * DAY;
  const offset = step >= 7 * DAY ? 4 * DAY : 0; // 1970-01-05 was a Monday
  const ticks = [];
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) {
    const d = new Date(t);
    const date = MONTHS[d.getUTCMonth()] + " " + d.getUTCDate();
    const hm = d.toISOString().slice(11, step < MIN ? 19 : 16);
    ticks.push({ t, label: t % DAY === 0 ? date : hm, day: t % DAY === 0 });
  }
  return ticks;
}

// thresholdUnits is the level, in units, at which a threshold ("80%" of
// the capacity cap, or an amount) is reached.
function thresholdUnits(th, cap) {
  if (th.endsWith("%")) return cap * toUnits(th.slice(0, -1)) / (100n * ONE);
  return toUnits(th);
}

// capacitySpan is where the chart's capacity line starts (ms). budgetd gives
// the capacity in force now (the series' capacity), not that of earlier
// periods, which rollover, grants and overrides may have made different: on
// a calendar-period limit whose window reaches back before the current
// period the line covers the current period only, and earlier is true.
function capacitySpan(series) {
  const t0 = msOf(series.from);
  const ps = series.period_start ? msOf(series.period_start) : NaN;
  return ps > t0 ? { from: ps, at: series.period_start, earlier: true } : { from: t0, at: series.from, earlier: false };
}

// frame draws a chart's axes of width W and height H with margins L, R,
// T and B, its time ticks (x maps a time to its abscissa) and, at the
// bottom right, the zone they are in.
function frame(root, { W, H, L, R, T, B }, x, ticks, zone) {
  root.append(svg("path", { d: `M${L},${T} V${H - B} H${W - R}`, stroke: "#d8dee4", fill: "none" }));
  for (const tk of ticks) {
    const xt = x(tk.t).toFixed(2);
    root.append(svg("line", { class: tk.day ? "tick day" : "tick", x1: xt, x2: xt, y1: T, y2: H - B }));
    const label = svg("text", { class: "tick", x: xt, y: H - B + 14, "text-anchor": "middle", "data-time": new Date(tk.t).toISOString() });
    label.textContent = tk.label;
    root.append(label);
  }
  const z = svg("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "zone" });
  z.textContent = zone;
  root.append(z);
}

function drawChart(series, bucket, entries, digits, thresholds) {
  const W = 800, H = 260, L = 64, R = 12, T = 12, B = 34;
  const items = series.items;
  const t0 = msOf(series.from), t1 = msOf(series.to);
  const span = t1 - t0 > 0 ? t1 - t0 : 1000;
  const cap = toUnits(series.capacity);
  let top = cap;
  for (const p of items) { const u = toUnits(p.level) + toUnits(p.held); if (u > top) top = u; }
  const marks = (thresholds || []).map((th) => ({ th, u: thresholdUnits(th, cap) }));
  for (const m of marks) if (m.u > top) top = m.u;
  top = top + top / 20n || ONE;
  const x = (t) => L + (W - L - R) * (t - t0) / span;
  const y = (v) => T + (H - T - B) * (1 - unitsToNumber(v) / unitsToNumber(top));

  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "level over time",
    "data-capacity": series.capacity, "data-from": series.from, "data-to": series.to });
  frame(root, { W, H, L, R, T, B }, x, timeTicks(t0, t1), "UTC");
  for (const v of [0n, cap]) {
    const label = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = showAmount(fromUnits(v), digits);
    root.append(label);
  }
  const cs = capacitySpan(series);
  const capX = cs.earlier ? x(cs.from).toFixed(2) : L;
  const capLine = svg("line", { class: "cap", x1: capX, x2: W - R, y1: y(cap), y2: y(cap),
    "data-level": series.capacity, "data-from": cs.at });
  const capTip = svg("title", {});
  capTip.textContent = `capacity ${series.capacity}` + (cs.earlier ? " in this period (from " + fmtTime(cs.at) + ")" : "");
  capLine.append(capTip);
  root.append(capLine);
  for (const m of marks) {
    // A percentage is of the capacity now: drawn where the capacity line is.
    const line = svg("line", { class: "threshold", x1: m.th.endsWith("%") ? capX : L, x2: W - R, y1: y(m.u), y2: y(m.u), "data-threshold": m.th, "data-level": fromUnits(m.u) });
    const tip = svg("title", {});
    tip.textContent = `threshold ${m.th}: ${fromUnits(m.u)}`;
    line.append(tip);
    root.append(line);
  }
  if (series.period_start) {
    const ps = msOf(series.period_start);
    if (ps > t0 && ps <= t1) {
      const xr = x(ps).toFixed(2);
      const reset = svg("line", { class: "reset", x1: xr, x2: xr, y1: T, y2: H - B, "data-time": series.period_start });
      const tip = svg("title", {});
      tip.textContent = "period start " + fmtTime(series.period_start);
      reset.append(tip);
      root.append(reset);
    }
  }
  const path = (vals) => items.map((p, i) => (i ? "L" : "M") + x(msOf(p.at)).toFixed(2) + "," + y(vals(p)).toFixed(2)).join(" ");
  if (items.some((p) => toUnits(p.held) > 0n)) {
    root.append(svg("path", { class: "used", d: path((p) => toUnits(p.level) + toUnits(p.held)) }));
  }
  root.append(svg("path", { class: "level", d: path((p) => toUnits(p.level)) || "M0,0", "data-points": items.length }));
  // Each event point carries its history entry: the entries, oldest first,
  // are the series' events in order.
  let j = 0;
  for (const p of items) {
    if (!p.event) continue;
    while (j < entries.length && !(entries[j].time === p.at && entries[j].event === p.event)) j++;
    const e = entries[j++] || {};
    const c = svg("circle", { class: p.event === "denied" ? "point denied" : "point", cx: x(msOf(p.at)).toFixed(2), cy: y(toUnits(p.level)).toFixed(2), r: 3.5,
      "data-time": p.at, "data-event": p.event, "data-level": p.level, "data-id": e.id });
    const tip = svg("title", {});
    tip.textContent = `${fmtTime(p.at)} ${p.event} ${e.amount ? showAmount(e.amount, digits) + " " : ""}→ level ${showAmount(p.level, digits)}, held ${showAmount(p.held, digits)}`;
    c.append(tip);
    root.append(c);
  }
  return root;
}

// ---- this period: used against an even pace --------------------------------

// localTicks are the ticks of a time axis from t0 to t1 (ms) in the
// viewer's zone: at most about eight, on whole hours for a period of up to
// two days (the date at midnight), else on midnights (every k-th day) or,
// past 100 days, on the first days of months.
const dayLabel = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
const hourLabel = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
function localTicks(t0, t1) {
  const span = t1 - t0;
  if (span <= 2 * DAY) {
    const step = [1, 2, 3, 6, 12].find((h) => span / (h * HOUR) <= 8) || 12;
    const d = new Date(t0);
    d.setMinutes(0, 0, 0);
    if (d.getTime() < t0) d.setTime(d.getTime() + HOUR);
    const ticks = [];
    for (; d.getTime() <= t1; d.setTime(d.getTime() + HOUR)) {
      if (d.getHours() % step) continue;
      const day = d.getHours() === 0;
      ticks.push({ t: d.getTime(), label: (day ? dayLabel : hourLabel).format(d), day });
    }
    return ticks;
  }
  const days = [];
  const d = new Date(t0);
  d.setHours(0, 0, 0, 0);
  if (d.getTime() < t0) d.setDate(d.getDate() + 1);
  for (; d.getTime() <= t1; d.setDate(d.getDate() + 1)) days.push(new Date(d));
  let pick = days;
  if (span > 100 * DAY) pick = days.filter((x) => x.getDate() === 1);
  const k = Math.ceil(pick.length / 8);
  return pick.filter((_, i) => i % k === 0).map((x) => ({ t: x.getTime(), label: dayLabel.format(x), day: true }));
}

// pace is where a bucket's use would be now at an even pace, and what it
// would reach at the reset at the pace it has kept since the period start
// (null before any use), all in units, exactly: BigInt over microseconds.
function pace(bucket, nowIso) {
  const p0 = usOf(bucket.period_start), p1 = usOf(bucket.resets_at);
  let now = usOf(nowIso);
  if (now < p0) now = p0;
  if (now > p1) now = p1;
  const len = p1 - p0, elapsed = now - p0;
  const cap = toUnits(bucket.capacity), used = toUnits(bucket.level) + toUnits(bucket.held);
  const even = len > 0n ? cap * elapsed / len : cap;
  const projected = elapsed > 0n && used > 0n ? used * len / elapsed : null;
  // When that pace reaches the capacity, if before the reset.
  const capAt = projected !== null && projected > cap && used < cap ? p0 + elapsed * cap / used : null;
  return { cap, used, even, projected, capAt, now };
}

const isoOfUs = (us) => new Date(Number(us / 1000n)).toISOString().replace(/Z$/, (us % 1000n).toString().padStart(3, "0") + "Z");

// periodPart is a periodic bucket's current period: when it started and
// resets (in the viewer's zone, the limit's beside it), a countdown to the
// reset, what is used against an even pace, and the burn-down chart.
function periodPart(limit, bucket, nowIso, period, zone, digits) {
  const p = pace(bucket, nowIso);
  const show = (u) => showAmount(fromUnits(u), digits);
  const out = [
    el("h2", { id: "this-period" }, "This period"),
    el("dl", { class: "stats", id: "period-stats" },
      stat("started", zonedTime(bucket.period_start, zone), "period_start"),
      stat("resets", zonedTime(bucket.resets_at, zone), "resets_at"),
      stat("resets in", el("span", { id: "countdown", "data-until": bucket.resets_at },
        countdownText(msOf(bucket.resets_at) - (Date.now() + serverSkew))), "countdown"),
      amountStat("used", fromUnits(p.used), show(p.used), "used"),
      amountStat("even pace now", fromUnits(p.even), show(p.even), "pace")),
  ];
  const diff = p.used - p.even;
  out.push(el("p", { class: "note", id: "pace-note" },
    `An even pace spends the capacity ${localDecimal(bucket.capacity)} evenly from the period start to the reset: ${show(p.even)} by now. `,
    diff > 0n ? `Used (level + held) is ${show(diff)} ahead of it.` : diff < 0n ? `Used (level + held) is ${show(-diff)} below it.` : "Used (level + held) is on it."));
  if (p.projected !== null) {
    out.push(el("p", { class: "note", id: "projection" },
      `At the pace since the period start the bucket would use ${show(p.projected)} by the reset (${showPercent(p.projected, p.cap)} of its capacity)`,
      p.used >= p.cap ? "; it is at its capacity already." : p.capAt !== null ? ["; it would reach its capacity at ", zonedTime(isoOfUs(p.capAt), zone), "."] : "."));
  }
  const held = p.used > toUnits(bucket.level) || (period && period.items.some((q) => toUnits(q.held) > 0n));
  out.push(el("div", { class: "legend", id: "period-legend" }, el("span", { class: "l" }, "level"), held ? el("span", { class: "h" }, "level + held") : null,
    el("span", { class: "cap" }, "capacity"), el("span", { class: "p" }, "even pace"), el("span", { class: "n" }, "now"),
    p.projected !== null ? el("span", { class: "x" }, "at the pace so far") : null));
  out.push(drawBurndown(bucket, nowIso, period, p, digits));
  out.push(el("p", { class: "note", id: "burndown-note" },
    period ? "" : (limit.history ? "The level over this period could not be read; " : "This limit keeps no history, so only the level now is drawn; "),
    `times in your zone (${VIEWER_ZONE}).`));
  return out;
}

// drawBurndown plots the current period from its start to the reset: the
// level (and level + held) so far, budgetd's series from the period start
// (linear between points, as the level chart), the capacity, the even-pace
// line from zero at the start to the capacity at the reset, now, and a
// dotted line on from now at the pace so far.
function drawBurndown(bucket, nowIso, period, p, digits) {
  const W = 800, H = 220, L = 64, R = 12, T = 12, B = 34;
  const t0 = msOf(bucket.period_start), t1 = msOf(bucket.resets_at);
  const tn = Math.min(Math.max(msOf(nowIso), t0), t1);
  // Points of the period only; of those at its very start, the one after
  // the reset.
  const all = period ? period.items : [];
  const items = all.filter((q, i) => msOf(q.at) > t0 || (msOf(q.at) === t0 && !(all[i + 1] && msOf(all[i + 1].at) === t0)));
  let top = p.cap > p.used ? p.cap : p.used;
  for (const q of items) { const u = toUnits(q.level) + toUnits(q.held); if (u > top) top = u; }
  top = top + top / 20n || ONE;
  const span = t1 - t0 > 0 ? t1 - t0 : 1000;
  const x = (t) => L + (W - L - R) * (t - t0) / span;
  const y = (v) => T + (H - T - B) * (1 - unitsToNumber(v) / unitsToNumber(top));
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "burndown", id: "burndown", role: "img",
    "aria-label": "this period: the level against an even pace", "data-from": bucket.period_start, "data-to": bucket.resets_at, "data-now": nowIso });
  frame(root, { W, H, L, R, T, B }, x, localTicks(t0, t1), VIEWER_ZONE);
  for (const v of [0n, p.cap]) {
    const label = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = showAmount(fromUnits(v), digits);
    root.append(label);
  }
  const tip = (node, text) => { const t = svg("title", {}); t.textContent = text; node.append(t); return node; };
  root.append(tip(svg("line", { class: "cap", x1: L, x2: W - R, y1: y(p.cap).toFixed(2), y2: y(p.cap).toFixed(2), "data-level": bucket.capacity }),
    "capacity " + bucket.capacity));
  root.append(tip(svg("line", { class: "pace", x1: L, y1: y(0n).toFixed(2), x2: W - R, y2: y(p.cap).toFixed(2),
    "data-from": bucket.period_start, "data-to": bucket.resets_at, "data-level": bucket.capacity }),
    `even pace: 0 at the period start, ${bucket.capacity} at the reset`));
  const path = (vals) => items.map((q, i) => (i ? "L" : "M") + x(msOf(q.at)).toFixed(2) + "," + y(vals(q)).toFixed(2)).join(" ");
  if (items.some((q) => toUnits(q.held) > 0n)) root.append(svg("path", { class: "used", d: path((q) => toUnits(q.level) + toUnits(q.held)) }));
  if (items.length) root.append(svg("path", { class: "level", d: path((q) => toUnits(q.level)), "data-points": items.length }));
  const xn = x(tn).toFixed(2);
  root.append(tip(svg("line", { class: "now", x1: xn, x2: xn, y1: T, y2: H - B, "data-time": nowIso }), "now " + zonedText(nowIso, undefined, true)));
  if (p.projected !== null) {
    // On at the pace so far, up to the reset or the top of the plot.
    let xe = W - R, ye = y(p.projected);
    if (p.projected > top) {
      const f = unitsToNumber(top - p.used) / unitsToNumber(p.projected - p.used);
      xe = Number(xn) + (W - R - Number(xn)) * f;
      ye = T;
    }
    root.append(tip(svg("line", { class: "projection", x1: xn, y1: y(p.used).toFixed(2), x2: xe.toFixed(2), y2: ye.toFixed(2),
      "data-level": fromUnits(p.projected) }), "at the pace so far: " + fromUnits(p.projected) + " at the reset"));
  }
  root.append(tip(svg("circle", { class: "now-point", cx: xn, cy: y(p.used).toFixed(2), r: 3.5, "data-level": fromUnits(p.used) }),
    "used now " + fromUnits(p.used)));
  return root;
}

// serverSkew is the store's clock less the browser's (ms) at the last read
// of a bucket, so that a countdown counts to the reset by budgetd's clock.
let serverSkew = 0;
function tickCountdowns() {
  for (const e of document.querySelectorAll("[data-until]")) e.textContent = countdownText(msOf(e.dataset.until) - (Date.now() + serverSkew));
}

// denialNote says whether the chart can show denials: a denial is in the
// history, and so on the chart (an open red dot that changes no level), only
// when the limit records denials (record_denials).
function denialNote(limit, series) {
  const drawn = series.items.some((p) => p.event === "denied");
  if (limit.record_denials) return "This limit records denials (record_denials): each is an open red dot, which changes no level.";
  if (drawn) return "The denials drawn were recorded while record_denials was on; it is off now, so later denials are not recorded.";
  return "This limit does not record denials (record_denials is off), so none are drawn.";
}

// ---- pages ---------------------------------------------------------------

function crumbs(...parts) {
  const nav = $("crumbs");
  nav.replaceChildren();
  parts.forEach((p, i) => {
    if (i) nav.append(" / ");
    nav.append(p.href ? el("a", { href: p.href }, p.text) : el("span", {}, p.text));
  });
}

// rule says in words how a limit refills, and its mode when it is not
// enforce.
function rule(l) {
  if (l.mode === "shadow") return `${refill(l)}, shadow: over-cap charges accepted and marked`;
  if (l.mode === "soft") return `${refill(l)}, soft: up to ${localDecimal(l.grace)} over`;
  return refill(l);
}

function refill(l) {
  if (l.window) {
    return `at most ${localDecimal(l.capacity)} in any ${l.window.length} (slots of ${l.window.precision})`;
  }
  if (l.period) {
    const from = l.period.start_day && l.period.start_day !== 1 ? ` from day ${l.period.start_day}` : "";
    return `resets every ${l.period.every}${from} (${l.period.tz})`;
  }
  return `${localDecimal(l.leak.amount)} per ${l.leak.per}`;
}

// fullness is how full a bucket is, (level + held) / capacity, for the
// bar; byFullness orders buckets fullest first exactly, in BigInt.
function fullness(b) {
  const cap = toUnits(b.capacity);
  if (cap <= 0n) return 0;
  return unitsToNumber(toUnits(b.level) + toUnits(b.held)) / unitsToNumber(cap);
}

function byFullness(a, b) {
  const ua = toUnits(a.level) + toUnits(a.held), ub = toUnits(b.level) + toUnits(b.held);
  const ca = toUnits(a.capacity), cb = toUnits(b.capacity);
  const d = ub * ca - ua * cb; // ub/cb − ua/ca, both capacities positive
  if (d !== 0n) return d > 0n ? 1 : -1;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

function bar(b) {
  const cap = unitsToNumber(toUnits(b.capacity)) || 1;
  const lv = Math.min(100, (100 * unitsToNumber(toUnits(b.level))) / cap);
  const hd = Math.min(100 - lv, (100 * unitsToNumber(toUnits(b.held))) / cap);
  const level = el("span", { class: "level" });
  const held = el("span", { class: "held" });
  level.style.width = lv.toFixed(2) + "%"; // CSSOM, which the page's CSP allows
  held.style.width = hd.toFixed(2) + "%";
  return el("div", { class: "bar", title: `level ${b.level}, held ${b.held} of ${b.capacity}`, "data-fill": fullness(b).toFixed(6) }, level, held);
}

async function limitsPage() {
  crumbs({ text: "limits" });
  const page = await api("/v1/limits?limit=1000");
  const shown = page.items.map((l) => bucketCount(l.name));
  const rows = page.items.map((l, i) => el("tr", { "data-limit": l.name },
    el("td", { class: "key" }, el("a", { href: "#/l/" + enc(l.name) }, l.name)),
    el("td", { class: "num", "data-field": "capacity", title: l.capacity }, localDecimal(l.capacity)),
    el("td", { "data-field": "rule" }, rule(l)),
    el("td", { class: "hide-narrow", "data-field": "history" }, l.history ? "on" : "off"),
    titled(el("td", { class: "num", "data-field": "buckets" }, shown[i].text), shown[i].title)));
  return [
    el("h1", {}, "Limits"),
    page.items.length === 0 ? el("p", { class: "note" }, "No limits yet. Create one with PUT /v1/limits/{name}.") :
      el("div", { class: "scroll" }, el("table", { id: "limits" },
        el("thead", {}, el("tr", {}, el("th", {}, "limit"), el("th", { class: "num" }, "capacity"), el("th", {}, "leaks"),
          el("th", { class: "hide-narrow" }, "history"), el("th", { class: "num" }, "buckets"))),
        el("tbody", {}, rows))),
    page.next_cursor ? el("p", { class: "note" }, "Showing the first 1000 limits.") : null,
  ];
}

// bucketCount is the number of a limit's buckets as the limits page shows
// it: exact, counted by budgetd (GET …/counts), which can take seconds on a
// large limit (docs/api.md). So the page does not wait for it: it shows "…"
// while the count is read in the background, and shows the page again
// when the count arrives; a count is kept for COUNT_TTL_MS.
function bucketCount(name) {
  let c = counts.get(name);
  if (c && (c.pending || Date.now() - c.at < COUNT_TTL_MS)) return c;
  c = { text: c ? c.text : "…", title: c ? c.title : "", at: Date.now(), pending: true };
  counts.set(name, c);
  const mine = c;
  api(limitPath(name) + "/counts").then((n) => {
    mine.text = localDecimal(String(n.buckets));
    mine.title = "exact, counted by budgetd at " + zonedText(n.at, null, true);
  }, (e) => {
    // A refused token is the page's own read's to show; this count is read again.
    if (e instanceof AuthError) counts.delete(name);
    mine.text = "?";
    mine.title = "Cannot count: " + e.message;
  }).finally(() => {
    mine.pending = false;
    mine.at = Date.now();
    if (counts.get(name) === mine && view && view.page === "limits" && timer) refresh();
  });
  return c;
}

async function limitPage(name) {
  crumbs({ text: "limits", href: "#/" }, { text: name });
  const [limit, page] = await Promise.all([
    api(limitPath(name)),
    api(limitPath(name) + "/buckets?limit=50" + (cursors[pageIndex] ? "&cursor=" + enc(cursors[pageIndex]) : "")),
  ]);
  if (page.next_cursor) cursors[pageIndex + 1] = page.next_cursor;
  const items = [...page.items].sort(byFullness);
  const digits = amountDigits(limit.capacity);
  const tz = limit.period && limit.period.tz;
  const num = (field, v) => el("td", { class: "num", "data-field": field, title: v }, showAmount(v, digits));
  const rows = items.map((b) => el("tr", { "data-key": b.key },
    el("td", { class: "key" }, el("a", { href: "#/l/" + enc(name) + "/b/" + enc(b.key) }, b.key)),
    el("td", {}, bar(b)),
    num("level", b.level), num("held", b.held), num("remaining", b.remaining),
    el("td", { class: "hide-narrow", "data-field": "updated_at" }, eventTime(b.updated_at, tz))));
  // The list is paged in key order; the whole limit is sorted only when it
  // fits on one page.
  const whole = pageIndex === 0 && !page.next_cursor;
  const order = whole
    ? `Fullest first (level + held of capacity), all ${items.length} buckets of this limit.`
    : "Fullest first within this page only: budgetd lists buckets in key order, 50 to a page, so a fuller bucket may be on another page.";
  const pager = el("div", { class: "pager" },
    el("button", { type: "button", disabled: pageIndex === 0, on: { click: () => { pageIndex--; refresh(); } } }, "Previous page"),
    el("button", { type: "button", id: "next-page", disabled: !page.next_cursor, on: { click: () => { pageIndex++; refresh(); } } }, "Next page"));
  const o = overview(name, limit);
  const counted = o.data && !o.data.counted.error ? o.data.counted : null;
  const failed = o.data && o.data.counted.error;
  const count = (n) => counted ? localDecimal(String(n)) : failed ? "?" : "…";
  const countedAt = counted ? "exact, counted by budgetd at " + zonedText(counted.at, tz, true) : failed ? "Cannot count: " + failed : "";
  return [
    el("h1", {}, name),
    el("dl", { class: "stats", id: "limit-stats" },
      amountStat("capacity", limit.capacity, localDecimal(limit.capacity)), stat("leaks", rule(limit)), stat("history", limit.history ? "on" : "off"),
      items[0] && items[0].resets_at ? stat("resets", zonedTime(items[0].resets_at, tz), "resets_at") : null,
      titled(stat("buckets", count(counted && counted.buckets), "bucket_count"), countedAt),
      titled(stat("active holds", count(counted && counted.active_holds), "hold_count"), countedAt)),
    ...overviewPart(name, o, digits),
    el("h2", {}, "Buckets" + (pageIndex ? ` (page ${pageIndex + 1})` : "")),
    el("p", { class: "note", id: "order" }, order),
    items.length === 0 ? el("p", { class: "note" }, "No buckets on this page.") :
      el("div", { class: "scroll" }, el("table", { id: "buckets" },
        el("thead", {}, el("tr", {}, el("th", {}, "key"), el("th", {}, "fill"), el("th", { class: "num" }, "level"),
          el("th", { class: "num" }, "held"), el("th", { class: "num" }, "remaining"), el("th", { class: "hide-narrow" }, "updated"))),
        el("tbody", {}, rows))),
    pager,
  ];
}

// ---- who is near the cap (a limit's page) ---------------------------------

// The overview reads, for each of the limit's thresholds, the first
// NEAR_N buckets past it (?above=T, in key order: an index read on
// PostgreSQL and MySQL), the TOP_N top spenders (?order=used, which reads
// every bucket of the limit on every store), and the exact number of its
// buckets and active holds, counted by budgetd (GET …/counts). Those can
// cost seconds on a large limit (docs/api.md), so the page reads them in
// the background, shows what it has, and reads them again at most every
// OVERVIEW_TTL_MS.
const OVERVIEW_TTL_MS = 30000;
const NEAR_N = 20, TOP_N = 10;
const overviews = new Map(); // limit name → {at, data, error, pending}

function overview(name, limit) {
  let o = overviews.get(name);
  if (o && (o.pending || Date.now() - o.at < OVERVIEW_TTL_MS)) return o;
  o = { at: Date.now(), data: o ? o.data : null, error: null, pending: true };
  overviews.set(name, o);
  const mine = o;
  readOverview(name, limit).then((d) => { mine.data = d; mine.error = null; }, (e) => { mine.error = e; })
    .finally(() => {
      mine.pending = false;
      mine.at = Date.now();
      if (overviews.get(name) === mine && view && view.page === "limit" && view.name === name && timer) refresh();
    });
  return o;
}

async function readOverview(name, limit) {
  const list = (q) => api(limitPath(name) + "/buckets?" + q);
  // A part that fails says so in its place; a refused token stops all.
  const soft = (p) => p.catch((e) => { if (e instanceof AuthError) throw e; return { error: e.message }; });
  const thresholds = limit.thresholds || [];
  const [above, top, counted] = await Promise.all([
    Promise.all(thresholds.map((t) => soft(list("above=" + enc(t) + "&limit=" + NEAR_N)))),
    soft(list("order=used&limit=" + TOP_N)),
    soft(api(limitPath(name) + "/counts")),
  ]);
  return { thresholds, above, top, counted, at: new Date() };
}

function overviewPart(name, o, digits) {
  const out = [el("h2", { id: "near-cap" }, "Who is near the cap")];
  if (!o.data) {
    out.push(el("p", { class: o.error ? "problem" : "note", id: "overview-wait" }, o.error ? "Cannot load: " + o.error.message : "Reading…"));
    return out;
  }
  const d = o.data;
  out.push(el("p", { class: "note", id: "overview-note" }, `As of ${d.at.toLocaleTimeString()}, read again at most every ${OVERVIEW_TTL_MS / 1000} s: `,
    "these listings may read every bucket of the limit. Past a threshold: the buckets whose last threshold event in this period was a crossing ",
    "(a bucket that leaked back below stays until its next write), fullest first."));
  if (!d.thresholds.length) {
    out.push(el("p", { class: "note", id: "no-thresholds" }, "This limit has no thresholds: give it some (thresholds in the limit) to see which buckets are past them."));
  }
  d.thresholds.forEach((t, i) => {
    const p = d.above[i];
    const n = p.items ? localDecimal(String(p.items.length)) + (p.next_cursor ? "+" : "") : "?";
    out.push(el("section", { class: "near", "data-threshold": t },
      el("h3", {}, `Past ${t} (${n})`),
      p.error ? el("p", { class: "problem" }, "Cannot list: " + p.error) :
        p.items.length === 0 ? el("p", { class: "note" }, `No bucket is past ${t}.`) :
          usageTable(name, [...p.items].sort(byFullness), digits, false),
      p.next_cursor ? el("p", { class: "note" }, `The first ${NEAR_N} past ${t} in key order; more are past it (GET …/buckets?above=${t}).`) : null));
  });
  out.push(el("h3", {}, "Top spenders"));
  out.push(d.top.error ? el("p", { class: "problem" }, "Cannot list: " + d.top.error) :
    d.top.items.length === 0 ? el("p", { class: "note" }, "No buckets yet.") : usageTable(name, d.top.items, digits, true, "top"));
  return out;
}

// usageTable lists buckets with what they use (level + held) of their
// effective capacity; ranked, with their rank first.
function usageTable(name, items, digits, ranked, id) {
  const rows = items.map((b, i) => {
    const used = toUnits(b.level) + toUnits(b.held), cap = toUnits(b.capacity);
    return el("tr", { "data-key": b.key },
      ranked ? el("td", { class: "num", "data-field": "rank" }, localDecimal(String(i + 1))) : null,
      el("td", { class: "key" }, el("a", { href: "#/l/" + enc(name) + "/b/" + enc(b.key) }, b.key)),
      el("td", { class: "hide-narrow" }, bar(b)),
      el("td", { class: "num", "data-field": "used", title: fromUnits(used) }, showAmount(fromUnits(used), digits)),
      el("td", { class: "num", "data-field": "share" }, cap > 0n ? showPercent(used, cap) : ""),
      el("td", { class: "num hide-narrow", "data-field": "capacity", title: b.capacity }, localDecimal(b.capacity)));
  });
  return el("div", { class: "scroll" }, el("table", { id, class: "usage" },
    el("thead", {}, el("tr", {}, ranked ? el("th", { class: "num" }, "#") : null, el("th", {}, "key"), el("th", { class: "hide-narrow" }, "fill"),
      el("th", { class: "num" }, "used"), el("th", { class: "num" }, "of capacity"), el("th", { class: "num hide-narrow" }, "capacity"))),
    el("tbody", {}, rows)));
}

function titled(node, title) { if (title) node.title = title; return node; }

// amountStat is a stat box whose text is shown (formatted) and whose exact
// value is in the title.
function amountStat(label, exact, shown, field) { return titled(stat(label, shown, field), exact); }

function stat(label, value, field) {
  return el("div", { class: "stat" }, el("dt", {}, label), el("dd", { "data-field": field || label }, value));
}

function metaCell(meta) {
  if (!meta || typeof meta !== "object") return el("td", { class: "meta" });
  return el("td", { class: "meta" }, Object.keys(meta).sort().map((k) => el("code", { class: "meta" }, k + "=" + String(meta[k]))));
}

// termsPart shows the bucket's terms: the override that applies (what it
// sets and when it ends), the active grants with their total and, on a
// limit with rollover, the rollover received this period, beside the
// effective capacity. A part whose store answered 501 (null here) is left
// out, and the whole section when there is nothing to show.
function termsPart(limit, bucket, override, grants, digits, zone) {
  if (!override && !grants && !limit.rollover) return [];
  const out = [el("h2", {}, "Terms")];
  const timed = (label, iso, field) => { const s = stat(label, iso ? zonedTime(iso, zone, true) : "no end", field); s.lastChild.title = iso || ""; return s; };
  if (override) {
    const o = override;
    out.push(el("dl", { class: "stats", id: "override" },
      stat("override", o.pattern, "pattern"),
      o.capacity != null ? amountStat("capacity", o.capacity, localDecimal(o.capacity), "capacity") : null,
      o.leak ? stat("leaks", `${localDecimal(o.leak.amount)} per ${o.leak.per}`, "leak") : null,
      o.period && o.period.tz ? stat("zone", o.period.tz, "tz") : null,
      o.period && o.period.start_day != null ? stat("start day", o.period.start_day, "start_day") : null,
      o.window ? stat("window", o.window.length, "window") : null,
      timed("ends", o.expires_at, "expires_at")));
  } else {
    out.push(el("p", { class: "note", id: "own-terms" }, "No override applies: the limit's own terms."));
  }
  const base = override && override.capacity != null ? override.capacity : limit.capacity;
  // An amount as a span: shown in the viewer's format, exact in the title.
  const exact = (field, v, id) => el("span", { "data-field": field, id, title: v }, localDecimal(v));
  out.push(el("p", { class: "note", id: "effective" }, "Effective capacity ",
    exact("capacity", bucket.capacity), " = ", override && override.capacity != null ? "the override's " : "the limit's ",
    exact("base", base), " + grants ", exact("grants", bucket.grants),
    limit.rollover ? " + rollover " : null, limit.rollover ? exact("rollover", bucket.rollover) : null,
    "."));
  if (limit.rollover) {
    out.push(el("p", { class: "note", id: "rollover" }, "Rollover received this period ",
      exact(undefined, bucket.rollover, "rollover-received"),
      `: what the bucket left unused of its capacity last period, at most ${localDecimal(limit.rollover.max)}.`));
  }
  if (grants) {
    out.push(el("h3", {}, `Active grants (${grants.items.length}), total `, exact(undefined, bucket.grants, "grants-total")));
    out.push(grants.items.length === 0 ? el("p", { class: "note", id: "no-grants" }, "No active grants.") :
      el("div", { class: "scroll" }, el("table", { id: "grants" },
        el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", { class: "num" }, "amount"), el("th", {}, "granted"), el("th", {}, "expires"))),
        el("tbody", {}, grants.items.map((g) => el("tr", { "data-id": g.id },
          el("td", { class: "key" }, g.id),
          el("td", { class: "num", "data-field": "amount", title: g.amount }, showAmount(g.amount, digits)),
          el("td", { "data-field": "created_at" }, eventTime(g.created_at, zone)),
          el("td", { "data-field": "expires_at", title: g.expires_at }, eventTime(g.expires_at, zone))))))));
  }
  return out;
}

async function bucketPage(name, key) {
  crumbs({ text: "limits", href: "#/" }, { text: name, href: "#/l/" + enc(name) }, { text: key });
  const [limit, bucket, hist, holds, series, events, grants] = await Promise.all([
    api(limitPath(name)),
    api(bucketPath(name, key)),
    api(bucketPath(name, key) + "/history?limit=1000"),
    api(bucketPath(name, key) + "/reservations"),
    api(bucketPath(name, key) + "/levels?points=400"),
    // A store that cannot list a bucket's events (501) leaves the section out.
    api(bucketPath(name, key) + "/events?limit=20").catch(() => null),
    // Likewise a store that keeps no grants (501).
    api(bucketPath(name, key) + "/grants").catch(() => null),
  ]);
  // The override that applies, read for what it sets; null when none
  // applies, when it ended between the two reads (404) or on a store that
  // keeps none (501).
  // The current period of a periodic bucket, from its start to now, as
  // budgetd computes it: null with history off (no items to draw) or when
  // the period started this instant (from must be before now).
  const [override, period] = await Promise.all([
    bucket.override ? api(limitPath(name) + "/overrides/" + enc(bucket.override)).catch(() => null) : null,
    bucket.period_start && limit.history
      ? api(bucketPath(name, key) + "/levels?points=200&from=" + enc(bucket.period_start)).catch(() => null) : null,
  ]);
  serverSkew = msOf(series.to) - Date.now(); // the store's clock, for the countdown
  const entries = [...hist.items].reverse(); // oldest first
  const hasMeta = hist.items.some((e) => e.meta && Object.keys(e.meta).length);
  const digits = amountDigits(limit.capacity);
  const amt = (label, v) => amountStat(label, v, showAmount(v, digits));
  const zone = (override && override.period && override.period.tz) || (limit.period && limit.period.tz);
  const out = [
    el("h1", { id: "bucket-key" }, key),
    el("dl", { class: "stats", id: "bucket-stats" },
      amt("level", bucket.level), amt("held", bucket.held), amt("remaining", bucket.remaining),
      amountStat("capacity", bucket.capacity, localDecimal(bucket.capacity)), stat("updated", eventTime(bucket.updated_at, zone), "updated_at"),
      bucket.resets_at ? stat("resets", zonedTime(bucket.resets_at, zone), "resets_at") : null),
    ...termsPart(limit, bucket, override, grants, digits, zone),
    ...(bucket.resets_at ? periodPart(limit, bucket, series.to, period, zone, digits) : []),
    el("h2", {}, "Level over time"),
  ];
  if (!limit.history) {
    out.push(el("p", { class: "note" }, "This limit keeps no history, so there is nothing to plot."));
  } else {
    const capEarlier = capacitySpan(series).earlier;
    out.push(el("div", { class: "legend" }, el("span", { class: "l" }, "level"),
      series.items.some((p) => toUnits(p.held) > 0n) ? el("span", { class: "h" }, "level + held") : null,
      el("span", { class: "c", "data-capacity": series.capacity, "data-scope": capEarlier ? "period" : "window" },
        "capacity " + localDecimal(series.capacity) + (capEarlier ? " in this period only (budgetd gives no capacity for earlier periods)" : "")),
      series.period_start ? el("span", { class: "r" }, "period start") : null,
      series.items.some((p) => p.event === "denied") ? el("span", { class: "d" }, "denied") : null,
      (limit.thresholds || []).length ? el("span", { class: "t" }, "thresholds " + limit.thresholds.join(", ")) : null));
    out.push(drawChart(series, bucket, entries, digits, limit.thresholds));
    if (bucket.resets_at) {
      out.push(el("p", { class: "note", id: "resets" }, "The level returns to zero at ", zonedTime(bucket.resets_at, zone),
        `, the start of the next ${limit.period.every} in ${zone}.`));
    }
    if (!series.complete) {
      out.push(el("p", { class: "note" }, "Older history was not read or has been pruned: the plot starts from the least level that ends at the level now."));
    }
    out.push(el("p", { class: "note", id: "chart-note" }, "Computed by budgetd from the history. ", denialNote(limit, series), " Times in UTC."));
  }
  out.push(el("h2", {}, `Active holds (${holds.items.length})`));
  out.push(holds.items.length === 0 ? el("p", { class: "note", id: "no-holds" }, "No active holds.") :
    el("div", { class: "scroll" }, el("table", { id: "holds" },
      el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", { class: "num" }, "amount"), el("th", {}, "created"), el("th", {}, "expires"))),
      el("tbody", {}, holds.items.map((h) => el("tr", { "data-id": h.id },
        el("td", { class: "key" }, h.id), el("td", { class: "num", "data-field": "amount", title: h.amount }, showAmount(h.amount, digits)),
        el("td", { "data-field": "created_at" }, eventTime(h.created_at, zone)),
        el("td", { "data-field": "expires_at" }, eventTime(h.expires_at, zone))))))));
  if (events && (events.items.length || (limit.thresholds || []).length)) {
    out.push(el("h2", {}, "Recent threshold events"));
    out.push(events.items.length === 0 ? el("p", { class: "note", id: "no-events" }, "No threshold crossed yet.") :
      el("div", { class: "scroll" }, el("table", { id: "events" },
        el("thead", {}, el("tr", {}, el("th", {}, "time"), el("th", {}, "event"), el("th", {}, "threshold"),
          el("th", { class: "num" }, "used"), el("th", { class: "num" }, "capacity"))),
        el("tbody", {}, events.items.map((e) => el("tr", { "data-id": e.id },
          el("td", { "data-field": "time" }, eventTime(e.time, zone)), el("td", { "data-field": "type" }, e.type.replace("threshold.", "")),
          el("td", { "data-field": "threshold" }, e.threshold),
          el("td", { class: "num", "data-field": "used", title: e.used }, showAmount(e.used, digits)),
          el("td", { class: "num", "data-field": "capacity", title: e.capacity }, localDecimal(e.capacity))))))));
    if (events.items.length) out.push(el("p", { class: "note" }, "The newest 20 events of this bucket, as GET /v1/events lists them (same ids)."));
  }
  out.push(el("h2", {}, "History"));
  if (hist.items.length === 0) {
    out.push(el("p", { class: "note" }, limit.history ? "No entries yet." : "History is off for this limit."));
  } else {
    out.push(el("div", { class: "scroll" }, el("table", { id: "history" },
      el("thead", {}, el("tr", {}, el("th", {}, "time"), el("th", {}, "event"), el("th", { class: "num" }, "amount"),
        el("th", { class: "hide-narrow" }, "hold"), hasMeta ? el("th", {}, "meta") : null)),
      el("tbody", {}, hist.items.slice(0, 200).map((e) => el("tr", { "data-id": e.id },
        el("td", { "data-field": "time" }, eventTime(e.time, zone)), el("td", { "data-field": "event" }, e.event),
        el("td", { class: "num", "data-field": "amount", title: e.amount }, showAmount(e.amount, digits)),
        el("td", { class: "key hide-narrow" }, e.reservation_id || ""),
        hasMeta ? metaCell(e.meta) : null))))));
    if (hist.items.length > 200) out.push(el("p", { class: "note" }, "The newest 200 entries are listed."));
  }
  return out;
}

// ---- routing, polling, auth ----------------------------------------------

function route() {
  const h = location.hash.replace(/^#\/?/, "");
  const parts = h.split("/");
  try {
    if (parts[0] === "l" && parts.length >= 2 && parts[1]) {
      const name = decodeURIComponent(parts[1]);
      if (parts[2] === "b" && parts.length >= 4) return { page: "bucket", name, key: decodeURIComponent(parts.slice(3).join("/")) };
      return { page: "limit", name };
    }
  } catch (e) { /* a malformed hash shows the limits */ }
  return { page: "limits" };
}

let again = false; // a refresh was asked for while one was running

async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  again = false;
  const shown = view;
  try {
    let nodes;
    if (view.page === "bucket") nodes = await bucketPage(view.name, view.key);
    else if (view.page === "limit") nodes = await limitPage(view.name);
    else nodes = await limitsPage();
    // A page read for a view left meanwhile is not shown: the new view's
    // refresh, asked for while this one ran, follows.
    if (shown !== view) return;
    $("auth").hidden = true;
    $("main").replaceChildren(...nodes.filter(Boolean));
    $("signout").hidden = !token;
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    if (shown !== view) return;
    if (e instanceof AuthError) {
      showAuth(e.message === "rejected"
        ? "The token was refused (401 Unauthorized). Check it and enter it again."
        : "This budgetd requires a bearer token (401 Unauthorized).");
    } else {
      setStatus("");
      $("main").replaceChildren(el("p", { class: "problem", id: "error" }, e.status === 404 ? "Not found: " + e.message : "Cannot load: " + e.message));
    }
  } finally {
    busy = false;
    if (again && timer) refresh(); // a click or a hash change during the last one
  }
}

function showAuth(msg) {
  stop();
  $("main").replaceChildren();
  $("auth").hidden = false;
  $("auth-msg").textContent = msg;
  $("signout").hidden = true;
  setStatus("");
  $("token").focus();
}

function start() {
  stop();
  refresh();
  timer = setInterval(refresh, POLL_MS[view.page]);
}
function stop() { if (timer) clearInterval(timer); timer = null; }

function navigate() {
  const v = route();
  if (!view || v.page !== view.page || v.name !== view.name) { cursors = [""]; pageIndex = 0; }
  view = v;
  $("main").replaceChildren(el("p", { class: "note" }, "Loading…"));
  start();
}

document.addEventListener("DOMContentLoaded", () => {
  $("auth-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    counts.clear();
    overviews.clear();
    $("token").value = "";
    if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
    start();
  });
  $("signout").addEventListener("click", () => {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    start();
  });
  window.addEventListener("hashchange", navigate);
  setInterval(tickCountdowns, 1000);
  navigate();
});
