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

// Go durations ("720h", "1h30m", "1.5s", "250ms") in whole microseconds.
function durationUs(s) {
  const unitNs = { h: 3600000000000n, m: 60000000000n, s: 1000000000n, ms: 1000000n, us: 1000n, "µs": 1000n, "μs": 1000n, ns: 1n };
  let ns = 0n;
  const re = /(\d+)(?:\.(\d+))?(h|ms|m|s|us|µs|μs|ns)/g;
  let m;
  while ((m = re.exec(s)) !== null) {
    const u = unitNs[m[3]];
    ns += BigInt(m[1]) * u;
    if (m[2]) ns += (BigInt(m[2]) * u) / 10n ** BigInt(m[2].length);
  }
  return ns / 1000n;
}

// RFC 3339 times with up to six fractional digits, in microseconds.
function timeUs(iso) {
  const m = /^(.{19})(?:\.(\d{1,6}))?Z$/.exec(iso || "");
  if (!m) return 0n;
  return BigInt(Date.parse(m[1] + "Z")) * 1000n + BigInt((m[2] || "").padEnd(6, "0"));
}

const usToMs = (us) => Number(us / 1000n);

function fmtTime(iso) {
  if (!iso) return "never";
  return iso.replace("T", " ").replace(/(\.\d{3})\d*Z$/, "$1Z");
}

// ---- the level over time --------------------------------------------------

// Events that settle the bucket (leak up to their time) and what they add.
const SETTLES = new Set(["fillup", "drain", "reserved", "committed", "released"]);
const DELTA = { fillup: 1n, committed: 1n, drain: -1n };

// levelSeries replays a bucket's history (oldest first) with the rule of
// package bucket: leak floor(amount × Δt / per) at 12 digits, clamp at zero,
// then add. It returns the points after each entry and the polyline.
function levelSeries(entries, limit, start, endUs) {
  if (limit.period) return periodSeries(entries, limit.period, start, endUs);
  const amount = toUnits(limit.leak.amount);
  const per = durationUs(limit.leak.per);
  const leaked = (dt) => (dt <= 0n || per <= 0n ? 0n : (amount * dt) / per);
  let level = start;
  let last = entries.length ? timeUs(entries[0].time) : endUs;
  const points = [];
  const line = [];
  const at = (t) => { const v = level - leaked(t - last); return v > 0n ? v : 0n; };
  for (const e of entries) {
    const t = timeUs(e.time);
    // Between events the level leaks; it may reach zero on the way.
    if (level > 0n && amount > 0n) {
      const zeroAt = last + (level * per + amount - 1n) / amount;
      if (zeroAt < t && line.length) line.push([zeroAt, 0n]);
    }
    const before = at(t);
    line.push([t, before]);
    if (SETTLES.has(e.event)) {
      level = before;
      last = t;
      if (DELTA[e.event]) {
        level += DELTA[e.event] * toUnits(e.amount);
        if (level < 0n) level = 0n;
      }
    }
    const after = SETTLES.has(e.event) ? level : before;
    line.push([t, after]);
    points.push({ t, level: after, entry: e });
  }
  if (endUs > last) {
    if (level > 0n && amount > 0n) {
      const zeroAt = last + (level * per + amount - 1n) / amount;
      if (zeroAt < endUs) line.push([zeroAt, 0n]);
    }
    line.push([endUs, at(endUs)]);
  }
  return { points, line, end: at(endUs) };
}

// periodKey names the calendar period of a periodic limit that contains
// the instant t (µs): the local date in the limit's zone, read with Intl
// (the browser's zone rules), mapped to its period as SPEC says: a day, an
// ISO week from start_day, a month or quarter from start_day, a year.
function periodKey(t, p) {
  const parts = {};
  for (const x of periodFormat(p.tz).formatToParts(new Date(usToMs(t)))) parts[x.type] = x.value;
  const y = Number(parts.year), m = Number(parts.month), d = Number(parts.day);
  const sd = p.start_day || 1;
  const dayNo = Math.floor(Date.UTC(y, m - 1, d) / 86400000);
  switch (p.every) {
    case "day": return dayNo;
    case "week": { const wd = (new Date(dayNo * 86400000).getUTCDay() + 6) % 7 + 1; return dayNo - ((wd - sd + 7) % 7); }
    case "month": return y * 12 + (m - 1) - (d < sd ? 1 : 0);
    case "quarter": { const mi = y * 12 + (m - 1) - (d < sd ? 1 : 0); return Math.floor(mi / 3); }
    default: return y;
  }
}

const periodFormats = new Map();
function periodFormat(tz) {
  if (!periodFormats.has(tz)) {
    periodFormats.set(tz, new Intl.DateTimeFormat("en-US", { timeZone: tz || "UTC", year: "numeric", month: "2-digit", day: "2-digit" }));
  }
  return periodFormats.get(tz);
}

// nextReset is the first instant after a (µs) in another period than a's,
// found by bisection between a and b (b in a later period), to the
// millisecond: a period starts on a whole local second.
function nextReset(a, b, p) {
  const k = periodKey(a, p);
  let lo = a, hi = b;
  while (hi - lo > 1000n) {
    const mid = lo + (hi - lo) / 2n;
    if (periodKey(mid, p) === k) lo = mid; else hi = mid;
  }
  return hi - (hi % 1000n);
}

// periodSeries is levelSeries for a periodic limit: the level does not
// leak; it is what the current period was charged, and it drops to zero at
// the first period start after the bucket's last write.
function periodSeries(entries, p, start, endUs) {
  let level = start;
  let last = entries.length ? timeUs(entries[0].time) : endUs;
  const points = [];
  const line = [];
  const reset = (t) => {
    if (level > 0n && periodKey(t, p) !== periodKey(last, p)) {
      const r = nextReset(last, t, p);
      if (line.length) line.push([r, level]);
      line.push([r, 0n]);
      level = 0n;
    }
  };
  for (const e of entries) {
    const t = timeUs(e.time);
    reset(t);
    line.push([t, level]);
    if (SETTLES.has(e.event)) {
      last = t;
      if (DELTA[e.event]) {
        level += DELTA[e.event] * toUnits(e.amount);
        if (level < 0n) level = 0n;
      }
    }
    line.push([t, level]);
    points.push({ t, level, entry: e });
  }
  if (endUs > last) {
    reset(endUs);
    line.push([endUs, level]);
  }
  return { points, line, end: level };
}

function drawChart(entries, limit, bucket, truncated) {
  const W = 800, H = 260, L = 56, R = 12, T = 12, B = 28;
  const nowUs = BigInt(Date.now()) * 1000n;
  const lastUs = entries.length ? timeUs(entries[entries.length - 1].time) : nowUs;
  const endUs = nowUs > lastUs ? nowUs : lastUs;
  let start = 0n;
  if (truncated) {
    // Older entries were not loaded: pick the smallest starting level that
    // ends at the level the API reports now.
    const target = toUnits(bucket.level);
    let lo = 0n, hi = target + toUnits(limit.capacity) * 4n + ONE;
    for (const e of entries) if (e.event === "drain") hi += toUnits(e.amount);
    if (limit.leak) hi += (toUnits(limit.leak.amount) * (endUs - (entries.length ? timeUs(entries[0].time) : endUs))) / (durationUs(limit.leak.per) || 1n);
    while (lo < hi) {
      const mid = (lo + hi) / 2n;
      if (levelSeries(entries, limit, mid, endUs).end >= target) hi = mid; else lo = mid + 1n;
    }
    start = lo;
  }
  const s = levelSeries(entries, limit, start, endUs);
  const t0 = s.line.length ? s.line[0][0] : endUs - 60000000n;
  const span = endUs - t0 > 0n ? endUs - t0 : 1000000n;
  const cap = toUnits(limit.capacity);
  const held = toUnits(bucket.held);
  let top = cap;
  for (const [, v] of s.line) if (v > top) top = v;
  if (s.end + held > top) top = s.end + held;
  top = top + top / 20n || ONE;
  const x = (t) => L + (W - L - R) * Number(t - t0) / Number(span);
  const y = (v) => T + (H - T - B) * (1 - unitsToNumber(v) / unitsToNumber(top));

  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "level over time",
    "data-capacity": limit.capacity, "data-start": fromUnits(start) });
  const axis = svg("path", { d: `M${L},${T} V${H - B} H${W - R}`, stroke: "#d8dee4", fill: "none" });
  root.append(axis);
  for (const v of [0n, cap]) {
    const label = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = fromUnits(v);
    root.append(label);
  }
  const capLine = svg("line", { class: "cap", x1: L, x2: W - R, y1: y(cap), y2: y(cap), "data-level": limit.capacity });
  root.append(capLine);
  if (held > 0n) {
    const xe = x(endUs);
    root.append(svg("rect", { class: "heldband", x: Math.max(L, xe - 10), width: Math.min(10, xe - L) || 10,
      y: y(s.end + held), height: Math.max(1, y(s.end) - y(s.end + held)), "data-held": bucket.held }));
  }
  const d = s.line.map(([t, v], i) => (i ? "L" : "M") + x(t).toFixed(2) + "," + y(v).toFixed(2)).join(" ");
  root.append(svg("path", { class: "level", d: d || "M0,0" }));
  for (const p of s.points) {
    const c = svg("circle", { class: "point", cx: x(p.t).toFixed(2), cy: y(p.level).toFixed(2), r: 3.5,
      "data-time": p.entry.time, "data-event": p.entry.event, "data-level": fromUnits(p.level), "data-id": p.entry.id });
    const tip = svg("title", {});
    tip.textContent = `${fmtTime(p.entry.time)} ${p.entry.event} ${p.entry.amount} → level ${fromUnits(p.level)}`;
    c.append(tip);
    root.append(c);
  }
  const tl = svg("text", { x: L, y: H - 8 });
  tl.textContent = fmtTime(new Date(usToMs(t0)).toISOString());
  const tr = svg("text", { x: W - R, y: H - 8, "text-anchor": "end" });
  tr.textContent = fmtTime(new Date(usToMs(endUs)).toISOString());
  root.append(tl, tr);
  return root;
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

function rule(l) {
  if (l.period) {
    const from = l.period.start_day && l.period.start_day !== 1 ? ` from day ${l.period.start_day}` : "";
    return `resets every ${l.period.every}${from} (${l.period.tz})`;
  }
  return `${l.leak.amount} per ${l.leak.per}`;
}

function fullness(b) {
  const cap = toUnits(b.capacity);
  if (cap <= 0n) return 0;
  return unitsToNumber(toUnits(b.level) + toUnits(b.held)) / unitsToNumber(cap);
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
  const items = [...page.items].sort((a, b) => fullness(b) - fullness(a) || (a.key < b.key ? -1 : 1));
  const rows = items.map((b) => el("tr", { "data-key": b.key },
    el("td", { class: "key" }, el("a", { href: "#/l/" + enc(name) + "/b/" + enc(b.key) }, b.key)),
    el("td", {}, bar(b)),
    el("td", { class: "num", "data-field": "level" }, b.level),
    el("td", { class: "num", "data-field": "held" }, b.held),
    el("td", { class: "num", "data-field": "remaining" }, b.remaining),
    el("td", { class: "hide-narrow", "data-field": "updated_at" }, fmtTime(b.updated_at))));
  const pager = el("div", { class: "pager" },
    el("button", { type: "button", disabled: pageIndex === 0, on: { click: () => { pageIndex--; refresh(); } } }, "Previous page"),
    el("button", { type: "button", id: "next-page", disabled: !page.next_cursor, on: { click: () => { pageIndex++; refresh(); } } }, "Next page"));
  return [
    el("h1", {}, name),
    el("dl", { class: "stats" },
      stat("capacity", limit.capacity), stat("leaks", rule(limit)), stat("history", limit.history ? "on" : "off")),
    el("h2", {}, "Buckets" + (pageIndex ? ` (page ${pageIndex + 1})` : "")),
    el("p", { class: "note" }, "Sorted by how full they are (level + held of capacity) within this page; pages follow key order."),
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

async function bucketPage(name, key) {
  crumbs({ text: "limits", href: "#/" }, { text: name, href: "#/l/" + enc(name) }, { text: key });
  const [limit, bucket, hist, holds] = await Promise.all([
    api(limitPath(name)),
    api(bucketPath(name, key)),
    api(bucketPath(name, key) + "/history?limit=1000"),
    api(bucketPath(name, key) + "/reservations"),
  ]);
  const entries = [...hist.items].reverse(); // oldest first
  const hasMeta = hist.items.some((e) => e.meta && Object.keys(e.meta).length);
  const out = [
    el("h1", { id: "bucket-key" }, key),
    el("dl", { class: "stats", id: "bucket-stats" },
      stat("level", bucket.level), stat("held", bucket.held), stat("remaining", bucket.remaining),
      stat("capacity", bucket.capacity), stat("updated", fmtTime(bucket.updated_at), "updated_at")),
    el("h2", {}, "Level over time"),
  ];
  if (!limit.history) {
    out.push(el("p", { class: "note" }, "This limit keeps no history, so there is nothing to plot."));
  } else {
    out.push(el("div", { class: "legend" }, el("span", { class: "l" }, "level"), el("span", { class: "h" }, "held now"),
      el("span", { class: "c" }, "capacity " + limit.capacity)));
    out.push(drawChart(entries, limit, bucket, Boolean(hist.next_cursor)));
    if (hist.next_cursor) out.push(el("p", { class: "note" }, "Only the newest 1000 entries are drawn; the level before them is inferred from the level now."));
  }
  out.push(el("h2", {}, `Active holds (${holds.items.length})`));
  out.push(holds.items.length === 0 ? el("p", { class: "note", id: "no-holds" }, "No active holds.") :
    el("div", { class: "scroll" }, el("table", { id: "holds" },
      el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", { class: "num" }, "amount"), el("th", {}, "created"), el("th", {}, "expires"))),
      el("tbody", {}, holds.items.map((h) => el("tr", { "data-id": h.id },
        el("td", { class: "key" }, h.id), el("td", { class: "num", "data-field": "amount" }, h.amount),
        el("td", {}, fmtTime(h.created_at)), el("td", {}, fmtTime(h.expires_at))))))));
  out.push(el("h2", {}, "History"));
  if (hist.items.length === 0) {
    out.push(el("p", { class: "note" }, limit.history ? "No entries yet." : "History is off for this limit."));
  } else {
    out.push(el("div", { class: "scroll" }, el("table", { id: "history" },
      el("thead", {}, el("tr", {}, el("th", {}, "time"), el("th", {}, "event"), el("th", { class: "num" }, "amount"),
        el("th", { class: "hide-narrow" }, "hold"), hasMeta ? el("th", {}, "meta") : null)),
      el("tbody", {}, hist.items.slice(0, 200).map((e) => el("tr", { "data-id": e.id },
        el("td", {}, fmtTime(e.time)), el("td", { "data-field": "event" }, e.event),
        el("td", { class: "num", "data-field": "amount" }, e.amount),
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
