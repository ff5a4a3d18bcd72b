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
const counts = new Map(); // limit name → {text, at}

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

// API times are RFC 3339 with six fractional digits, in UTC.
const msOf = (iso) => Date.parse(String(iso).replace(/(\.\d{3})\d*Z$/, "$1Z"));

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
  root.append(svg("path", { d: `M${L},${T} V${H - B} H${W - R}`, stroke: "#d8dee4", fill: "none" }));
  for (const tk of timeTicks(t0, t1)) {
    const xt = x(tk.t).toFixed(2);
    root.append(svg("line", { class: tk.day ? "tick day" : "tick", x1: xt, x2: xt, y1: T, y2: H - B }));
    const label = svg("text", { class: "tick", x: xt, y: H - B + 14, "text-anchor": "middle", "data-time": new Date(tk.t).toISOString() });
    label.textContent = tk.label;
    root.append(label);
  }
  const utc = svg("text", { x: W - R, y: H - 4, "text-anchor": "end" });
  utc.textContent = "UTC";
  root.append(utc);
  for (const v of [0n, cap]) {
    const label = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = fmtAmount(fromUnits(v), digits);
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
    tip.textContent = `${fmtTime(p.at)} ${p.event} ${e.amount ? fmtAmount(e.amount, digits) + " " : ""}→ level ${fmtAmount(p.level, digits)}, held ${fmtAmount(p.held, digits)}`;
    c.append(tip);
    root.append(c);
  }
  return root;
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
  if (l.mode === "soft") return `${refill(l)}, soft: up to ${l.grace} over`;
  return refill(l);
}

function refill(l) {
  if (l.window) {
    return `at most ${l.capacity} in any ${l.window.length} (slots of ${l.window.precision})`;
  }
  if (l.period) {
    const from = l.period.start_day && l.period.start_day !== 1 ? ` from day ${l.period.start_day}` : "";
    return `resets every ${l.period.every}${from} (${l.period.tz})`;
  }
  return `${l.leak.amount} per ${l.leak.per}`;
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
  const shown = await Promise.all(page.items.map((l) => bucketCount(l.name)));
  const rows = page.items.map((l, i) => el("tr", { "data-limit": l.name },
    el("td", { class: "key" }, el("a", { href: "#/l/" + enc(l.name) }, l.name)),
    el("td", { class: "num", "data-field": "capacity" }, l.capacity),
    el("td", { "data-field": "rule" }, rule(l)),
    el("td", { class: "hide-narrow", "data-field": "history" }, l.history ? "on" : "off"),
    el("td", { class: "num", "data-field": "buckets" }, shown[i])));
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
// it: up to 100, then "100+"; kept for COUNT_TTL_MS.
async function bucketCount(name) {
  const c = counts.get(name);
  if (c && Date.now() - c.at < COUNT_TTL_MS) return c.text;
  let text = "?";
  try {
    const p = await api(limitPath(name) + "/buckets?limit=100");
    text = p.next_cursor ? "100+" : String(p.items.length);
  } catch (e) {
    if (e instanceof AuthError) throw e;
  }
  counts.set(name, { text, at: Date.now() });
  return text;
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
  const num = (field, v) => el("td", { class: "num", "data-field": field, title: v }, fmtAmount(v, digits));
  const rows = items.map((b) => el("tr", { "data-key": b.key },
    el("td", { class: "key" }, el("a", { href: "#/l/" + enc(name) + "/b/" + enc(b.key) }, b.key)),
    el("td", {}, bar(b)),
    num("level", b.level), num("held", b.held), num("remaining", b.remaining),
    el("td", { class: "hide-narrow", "data-field": "updated_at" }, fmtTime(b.updated_at))));
  // The list is paged in key order; the whole limit is sorted only when it
  // fits on one page.
  const whole = pageIndex === 0 && !page.next_cursor;
  const order = whole
    ? `Fullest first (level + held of capacity), all ${items.length} buckets of this limit.`
    : "Fullest first within this page only: budgetd lists buckets in key order, 50 to a page, so a fuller bucket may be on another page.";
  const pager = el("div", { class: "pager" },
    el("button", { type: "button", disabled: pageIndex === 0, on: { click: () => { pageIndex--; refresh(); } } }, "Previous page"),
    el("button", { type: "button", id: "next-page", disabled: !page.next_cursor, on: { click: () => { pageIndex++; refresh(); } } }, "Next page"));
  return [
    el("h1", {}, name),
    el("dl", { class: "stats" },
      stat("capacity", limit.capacity), stat("leaks", rule(limit)), stat("history", limit.history ? "on" : "off"),
      items[0] && items[0].resets_at ? stat("resets", fmtTime(items[0].resets_at), "resets_at") : null),
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
function termsPart(limit, bucket, override, grants, digits) {
  if (!override && !grants && !limit.rollover) return [];
  const out = [el("h2", {}, "Terms")];
  const timed = (label, iso, field) => { const s = stat(label, iso ? fmtTime(iso) : "no end", field); s.lastChild.title = iso || ""; return s; };
  if (override) {
    const o = override;
    out.push(el("dl", { class: "stats", id: "override" },
      stat("override", o.pattern, "pattern"),
      o.capacity != null ? stat("capacity", o.capacity, "capacity") : null,
      o.leak ? stat("leaks", `${o.leak.amount} per ${o.leak.per}`, "leak") : null,
      o.period && o.period.tz ? stat("zone", o.period.tz, "tz") : null,
      o.period && o.period.start_day != null ? stat("start day", o.period.start_day, "start_day") : null,
      o.window ? stat("window", o.window.length, "window") : null,
      timed("ends", o.expires_at, "expires_at")));
  } else {
    out.push(el("p", { class: "note", id: "own-terms" }, "No override applies: the limit's own terms."));
  }
  const base = override && override.capacity != null ? override.capacity : limit.capacity;
  out.push(el("p", { class: "note", id: "effective" }, "Effective capacity ",
    el("span", { "data-field": "capacity" }, bucket.capacity), " = ", override && override.capacity != null ? "the override's " : "the limit's ",
    el("span", { "data-field": "base" }, base), " + grants ", el("span", { "data-field": "grants" }, bucket.grants),
    limit.rollover ? " + rollover " : null, limit.rollover ? el("span", { "data-field": "rollover" }, bucket.rollover) : null,
    "."));
  if (limit.rollover) {
    out.push(el("p", { class: "note", id: "rollover" }, "Rollover received this period ",
      el("span", { id: "rollover-received" }, bucket.rollover),
      `: what the bucket left unused of its capacity last period, at most ${limit.rollover.max}.`));
  }
  if (grants) {
    out.push(el("h3", {}, `Active grants (${grants.items.length}), total `, el("span", { id: "grants-total" }, bucket.grants)));
    out.push(grants.items.length === 0 ? el("p", { class: "note", id: "no-grants" }, "No active grants.") :
      el("div", { class: "scroll" }, el("table", { id: "grants" },
        el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", { class: "num" }, "amount"), el("th", {}, "granted"), el("th", {}, "expires"))),
        el("tbody", {}, grants.items.map((g) => el("tr", { "data-id": g.id },
          el("td", { class: "key" }, g.id),
          el("td", { class: "num", "data-field": "amount", title: g.amount }, fmtAmount(g.amount, digits)),
          el("td", {}, fmtTime(g.created_at)),
          el("td", { "data-field": "expires_at", title: g.expires_at }, fmtTime(g.expires_at))))))));
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
  const override = bucket.override
    ? await api(limitPath(name) + "/overrides/" + enc(bucket.override)).catch(() => null) : null;
  const entries = [...hist.items].reverse(); // oldest first
  const hasMeta = hist.items.some((e) => e.meta && Object.keys(e.meta).length);
  const digits = amountDigits(limit.capacity);
  const amt = (label, v) => { const s = stat(label, fmtAmount(v, digits)); s.title = v; return s; };
  const out = [
    el("h1", { id: "bucket-key" }, key),
    el("dl", { class: "stats", id: "bucket-stats" },
      amt("level", bucket.level), amt("held", bucket.held), amt("remaining", bucket.remaining),
      stat("capacity", bucket.capacity), stat("updated", fmtTime(bucket.updated_at), "updated_at"),
      bucket.resets_at ? stat("resets", fmtTime(bucket.resets_at), "resets_at") : null),
    ...termsPart(limit, bucket, override, grants, digits),
    el("h2", {}, "Level over time"),
  ];
  if (!limit.history) {
    out.push(el("p", { class: "note" }, "This limit keeps no history, so there is nothing to plot."));
  } else {
    const capEarlier = capacitySpan(series).earlier;
    out.push(el("div", { class: "legend" }, el("span", { class: "l" }, "level"),
      series.items.some((p) => toUnits(p.held) > 0n) ? el("span", { class: "h" }, "level + held") : null,
      el("span", { class: "c", "data-capacity": series.capacity, "data-scope": capEarlier ? "period" : "window" },
        "capacity " + series.capacity + (capEarlier ? " in this period only (budgetd gives no capacity for earlier periods)" : "")),
      series.period_start ? el("span", { class: "r" }, "period start") : null,
      series.items.some((p) => p.event === "denied") ? el("span", { class: "d" }, "denied") : null,
      (limit.thresholds || []).length ? el("span", { class: "t" }, "thresholds " + limit.thresholds.join(", ")) : null));
    out.push(drawChart(series, bucket, entries, digits, limit.thresholds));
    if (bucket.resets_at) {
      out.push(el("p", { class: "note", id: "resets" }, `The level returns to zero at ${fmtTime(bucket.resets_at)}, the start of the next ${limit.period.every} in ${limit.period.tz}.`));
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
        el("td", { class: "key" }, h.id), el("td", { class: "num", "data-field": "amount" }, h.amount),
        el("td", {}, fmtTime(h.created_at)), el("td", {}, fmtTime(h.expires_at))))))));
  if (events && (events.items.length || (limit.thresholds || []).length)) {
    out.push(el("h2", {}, "Recent threshold events"));
    out.push(events.items.length === 0 ? el("p", { class: "note", id: "no-events" }, "No threshold crossed yet.") :
      el("div", { class: "scroll" }, el("table", { id: "events" },
        el("thead", {}, el("tr", {}, el("th", {}, "time"), el("th", {}, "event"), el("th", {}, "threshold"),
          el("th", { class: "num" }, "used"), el("th", { class: "num" }, "capacity"))),
        el("tbody", {}, events.items.map((e) => el("tr", { "data-id": e.id },
          el("td", {}, fmtTime(e.time)), el("td", { "data-field": "type" }, e.type.replace("threshold.", "")),
          el("td", { "data-field": "threshold" }, e.threshold),
          el("td", { class: "num", "data-field": "used", title: e.used }, fmtAmount(e.used, digits)),
          el("td", { class: "num", "data-field": "capacity" }, e.capacity)))))));
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
        el("td", {}, fmtTime(e.time)), el("td", { "data-field": "event" }, e.event),
        el("td", { class: "num", "data-field": "amount", title: e.amount }, fmtAmount(e.amount, digits)),
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
  try {
    let nodes;
    if (view.page === "bucket") nodes = await bucketPage(view.name, view.key);
    else if (view.page === "limit") nodes = await limitPage(view.name);
    else nodes = await limitsPage();
    $("auth").hidden = true;
    $("main").replaceChildren(...nodes.filter(Boolean));
    $("signout").hidden = !token;
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (e) {
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
  navigate();
});
