// fence dashboard: the lock table, a lock's detail, members and counters,
// kept live by the Watch stream (server-sent events over fetch, so the
// bearer token can go in a header). Every data call is the gRPC call it
// stands for, judged by the server; this page decides nothing.
"use strict";

const HISTORY_ENTRIES = 5000; // raft entries before the listing to replay into "recent events"
const MAX_ROWS = 500;         // rows drawn at once (filter for the others)
const MAX_PAGES = 10;         // ListLocks pages of 1000 read at most
const LOCK_EVENTS = 50;       // events kept per lock
const EVENT_LOCKS = 1000;     // locks whose events are kept (the least lately active go first)
const FEED_EVENTS = 100;      // events kept in the feed
const SAMPLES = 120;          // chart samples (one a second)
const REFUSED_WAIT = 60000;   // ms before a call refused for want of an identity or a right is made again

const $ = (id) => document.getElementById(id);

const state = {
  locks: new Map(),   // name -> {info, at (ms, when info was read), index}
  listIndex: 0,       // raft index of the listing the table started from
  listedAt: 0,        // when the table was last listed (ms)
  lastIndex: 0,       // last index the watch reported
  pending: new Set(), // names to read again (GetLock)
  events: new Map(),  // name -> recent events, newest last (EVENT_LOCKS names, least lately active first)
  feed: [],           // recent events of every lock, newest last
  selected: null,     // the lock in the detail view
  detail: null,       // its GetLock answer
  detailAt: 0,
  mayForce: new Map(),// name -> whether the server admits ForceRelease
  watch: null,        // AbortController of the watch
  rewatch: 0,         // the timer of its next attempt
  refused: new Map(), // call -> when the server last refused it for want of an identity or a right
  filter: "",
};

// ---- calls ----

function token() { return sessionStorage.getItem("fence-token") || ""; }

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

class CallError extends Error {
  constructor(http, body) {
    const e = (body && body.error) || {};
    super(e.message || ("HTTP " + http));
    this.http = http;
    this.status = e.status || "";
    this.details = e.details || [];
  }
  detail(type) { return this.details.find((d) => (d["@type"] || "").endsWith("." + type)); }
}

async function readError(resp) {
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not JSON */ }
  return new CallError(resp.status, body);
}

async function post(path, body) {
  const resp = await fetch(path, { method: "POST", headers: headers(true), body: JSON.stringify(body || {}), cache: "no-store" });
  if (!resp.ok) throw await readError(resp);
  return resp.json();
}

const call = (name, body) => post("/ui/api/v1/" + name, body);

function requestID() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return btoa(String.fromCharCode(...b));
}

// ---- errors ----

// Each refusal for want of an identity or a right is counted, logged and
// audited by the server: a page left open without one must not ask every
// second. Such a call is made again after REFUSED_WAIT, or with a new token.
const isRefusal = (err) => err && (err.status === "UNAUTHENTICATED" || err.status === "PERMISSION_DENIED");

function noteRefusal(what, err) {
  if (isRefusal(err)) state.refused.set(what, Date.now()); else state.refused.delete(what);
}

function refusedLately(what) {
  const at = state.refused.get(what);
  return at !== undefined && Date.now() - at < REFUSED_WAIT;
}

const problems = new Map(); // what -> message

function problem(what, err) {
  if (err) problems.set(what, err.message || String(err)); else problems.delete(what);
  const el = $("error");
  el.hidden = problems.size === 0;
  el.textContent = [...new Set(problems.values())].join(" · ");
}

// ---- durations ----

function seconds(d) { return d === undefined || d === null ? null : parseFloat(d); }

function fmtDur(s) {
  if (s === null || isNaN(s)) return "—";
  if (s < 0) s = 0;
  if (s < 10) return s.toFixed(1) + "s";
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

// since: seconds since a reading taken at `at` (ms).
const since = (at) => (Date.now() - at) / 1000;

// ---- the table ----

function grantsOf(info) {
  if (info.grants && info.grants.length) return info.grants;
  if (info.holder_lease_number && info.holder_lease_number !== "0") {
    return [{ lease_number: info.holder_lease_number, owner: info.holder_owner, token: info.token, slot: 0,
      ttl_left: info.ttl_left, held_for: info.held_for }];
  }
  return [];
}

async function listAll() {
  const locks = [];
  let after = "", index = 0, more = true, pages = 0;
  while (more && pages < MAX_PAGES) {
    const r = await call("ListLocks", { after, limit: 1000 });
    (r.locks || []).forEach((l) => locks.push(l));
    more = r.more; index = Number(r.index); pages++;
    if (locks.length) after = locks[locks.length - 1].name;
  }
  return { locks, index, more };
}

async function reload() {
  try {
    const r = await listAll();
    const now = Date.now();
    state.locks = new Map(r.locks.map((l) => [l.name, { info: l, at: now, index: r.index }]));
    state.listedAt = now;
    state.listIndex = Math.max(state.listIndex, r.index);
    state.truncated = r.more;
    noteRefusal("list", null);
    problem("list", null);
    render();
    return r.index;
  } catch (err) {
    noteRefusal("list", err);
    problem("list", err);
    return null;
  }
}

function gone(info) {
  return grantsOf(info).length === 0 && !info.delayed && !(info.waiters > 0);
}

async function refreshPending() {
  if (state.pending.size === 0) return;
  const names = [...state.pending];
  state.pending.clear();
  // Many rows touched at once (a busy cluster): the events have already
  // updated them; one listing every 2 s at most fills in the rest, rather
  // than a GetLock each.
  if (names.length > 40) {
    if (Date.now() - state.listedAt > 2000) await reload();
    return;
  }
  await Promise.all(names.map(async (name) => {
    try {
      const r = await call("GetLock", { name });
      const index = Number(r.index), cur = state.locks.get(name);
      if (cur && cur.index > index) return; // an older read than the one shown
      if (gone(r.lock)) state.locks.delete(name);
      else state.locks.set(name, { info: r.lock, at: Date.now(), index });
      if (name === state.selected) { state.detail = r; state.detailAt = Date.now(); }
    } catch (err) {
      // Refused (the policy) or not the leader: the periodic listing and
      // the error line say so; no retry loop here.
      if (err.status === "PERMISSION_DENIED") state.locks.delete(name);
    }
  }));
  render();
}

// apply changes the table at once from an event (the GetLock that follows
// fills in TTLs and queues).
function apply(e) {
  const cur = state.locks.get(e.name);
  const info = cur ? cur.info : { name: e.name, permits: 1, grants: [], waiters: 0 };
  const grants = grantsOf(info).filter((g) => g.token !== e.token);
  switch (e.type) {
    case "TYPE_GRANTED":
      grants.push({ lease_number: e.lease_number, owner: e.owner, token: e.token, slot: e.slot || 0, shared: e.shared, held_for: "0s" });
      break;
    case "TYPE_RELEASED":
      break;
    case "TYPE_WAITER_JOINED":
      info.waiters = (info.waiters || 0) + 1;
      break;
    case "TYPE_WAITER_LEFT":
      info.waiters = Math.max(0, (info.waiters || 0) - 1);
      break;
    case "TYPE_WRITTEN":
      return; // the fenced key of the same name, not the lock
    default:
      state.pending.add(e.name);
      return;
  }
  info.grants = grants;
  const first = grants[0];
  info.holder_lease_number = first ? first.lease_number : "0";
  info.holder_owner = first ? first.owner : "";
  if (first) info.token = first.token;
  info.ttl_left = first ? first.ttl_left : undefined;
  info.held_for = first ? first.held_for : undefined;
  if (gone(info)) state.locks.delete(e.name);
  else state.locks.set(e.name, { info, at: Date.now(), index: cur ? cur.index : 0 });
  state.pending.add(e.name);
}

function cell(tr, cls, lines) {
  const td = document.createElement("td");
  td.className = cls;
  for (const l of lines) {
    const span = document.createElement("span");
    span.className = "line";
    span.textContent = l;
    td.appendChild(span);
  }
  tr.appendChild(td);
  return td;
}

function kindOf(info) {
  const grants = grantsOf(info);
  if (info.permits > 1) return "semaphore " + grants.filter((g) => !g.delayed).length + "/" + info.permits;
  if (grants.some((g) => g.shared)) return "read-write: " + grants.length + " reader" + (grants.length === 1 ? "" : "s");
  return "";
}

function renderTable() {
  const tbody = $("locks").tBodies[0];
  const rows = [];
  let shown = 0, matched = 0;
  const names = [...state.locks.keys()].sort();
  for (const name of names) {
    if (!name.startsWith(state.filter)) continue;
    matched++;
    if (shown >= MAX_ROWS) continue;
    shown++;
    const { info, at } = state.locks.get(name);
    const grants = grantsOf(info);
    const tr = document.createElement("tr");
    tr.dataset.name = name;
    if (name === state.selected) tr.className = "selected";
    const nameTd = cell(tr, "name", [name]);
    const kind = kindOf(info);
    if (kind) {
      const t = document.createElement("span");
      t.className = "tag"; t.textContent = kind;
      nameTd.firstChild.appendChild(t);
    }
    if (info.delayed && grants.every((g) => g.delayed !== false)) {
      const t = document.createElement("span");
      t.className = "tag delay"; t.textContent = "lock-delay " + fmtDur(seconds(info.delay_left) - since(at));
      nameTd.firstChild.appendChild(t);
    }
    const held = grants.filter((g) => !g.delayed);
    cell(tr, "holder", held.length ? held.map((g) => (g.owner || "(no owner)") + (g.shared ? " (read)" : "")) : ["—"]);
    cell(tr, "lease", held.map((g) => "#" + g.lease_number));
    cell(tr, "token", grants.map((g) => g.token));
    cell(tr, "held", held.map((g) => fmtDur(seconds(g.held_for) === null ? null : seconds(g.held_for) + since(at))));
    cell(tr, "ttl", held.map((g) => fmtDur(seconds(g.ttl_left) === null ? null : seconds(g.ttl_left) - since(at))));
    const w = cell(tr, "waiters", [String(info.waiters || 0)]);
    if (info.waiters > 0) w.classList.add("waiting");
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
  $("count").textContent = matched + " lock" + (matched === 1 ? "" : "s") + (state.filter ? " under \"" + state.filter + "\"" : "") +
    (state.truncated ? " (the first " + MAX_PAGES * 1000 + " names only)" : "");
  const more = $("more");
  more.hidden = matched <= MAX_ROWS;
  more.textContent = (matched - MAX_ROWS) + " more: filter by prefix to see them";
}

// ---- the detail view ----

function renderDetail() {
  const box = $("detail");
  if (!state.selected) { box.hidden = true; return; }
  box.hidden = false;
  $("dname").textContent = state.selected;
  const r = state.detail, at = state.detailAt;
  const info = r ? r.lock : (state.locks.get(state.selected) || {}).info;
  const grants = info ? grantsOf(info) : [];
  const kind = info ? kindOf(info) : "";
  $("dkind").textContent = (kind || "mutex") + (info && info.delayed ? " · in lock-delay (" + fmtDur(seconds(info.delay_left) - since(at)) + " left)" : "") +
    (grants.length === 0 ? " · free" : "");
  const may = state.mayForce.get(state.selected) === true;
  box.dataset.may = state.mayForce.has(state.selected) ? String(may) : ""; // (the server's answer, once in)
  const tbody = $("dgrants").tBodies[0];
  // Rebuilt only when the grants change, so a click on a button is not
  // lost to a redraw; the countdowns are updated in place.
  const key = state.selected + "|" + may + "|" + grants.map((g) => g.token + ":" + g.lease_number + ":" + !!g.delayed).join(",");
  if (tbody.dataset.key === key) {
    [...tbody.rows].forEach((tr, i) => {
      const g = grants[i];
      tr.querySelector(".held .line").textContent = fmtDur(seconds(g.held_for) === null ? null : seconds(g.held_for) + since(at));
      tr.querySelector(".ttl .line").textContent = fmtDur(seconds(g.ttl_left) === null ? null : seconds(g.ttl_left) - since(at));
    });
  } else tbody.replaceChildren(...grants.map((g) => {
    const tr = document.createElement("tr");
    cell(tr, "slot", [String(g.slot || 0)]);
    cell(tr, "holder", [g.delayed ? "(lease expired: lock-delay)" : (g.owner || "(no owner)") + (g.shared ? " (read)" : "")]);
    cell(tr, "lease", [g.delayed ? "—" : "#" + g.lease_number]);
    cell(tr, "token", [g.token]);
    cell(tr, "held", [fmtDur(seconds(g.held_for) === null ? null : seconds(g.held_for) + since(at))]);
    cell(tr, "ttl", [fmtDur(seconds(g.ttl_left) === null ? null : seconds(g.ttl_left) - since(at))]);
    const td = cell(tr, "act", []);
    if (may && !g.delayed) {
      const b = document.createElement("button");
      b.type = "button"; b.className = "danger force"; b.textContent = "force release";
      b.dataset.token = g.token;
      b.addEventListener("click", () => forceRelease(state.selected, g));
      td.appendChild(b);
    }
    return tr;
  }));
  tbody.dataset.key = key;
  const q = (r && r.queue) || [];
  $("dqueue").replaceChildren(...q.map((w) => {
    const li = document.createElement("li");
    li.textContent = (w.owner || "(no owner)") + " #" + w.lease_number + (w.shared ? " (read)" : "");
    return li;
  }));
  if (q.length === 0) {
    const li = document.createElement("li");
    li.className = "muted"; li.textContent = "nobody waits";
    $("dqueue").appendChild(li);
  }
  renderEvents($("devents"), state.events.get(state.selected) || [], false);
}

async function select(name) {
  state.selected = name;
  state.detail = null;
  render();
  if (!name) return;
  state.pending.add(name);
  await refreshPending();
  if (!state.mayForce.has(name)) {
    try {
      await post("/ui/api/may/ForceRelease", { name });
      state.mayForce.set(name, true);
    } catch (_) {
      state.mayForce.set(name, false); // the server refuses it: no button
    }
    render();
  }
}

async function forceRelease(name, g) {
  const ok = confirm("Force-release lock \"" + name + "\"?\n\nholder: " + (g.owner || "(no owner)") + " (lease #" + g.lease_number + ")\ntoken: " + g.token +
    "\n\nThe holder's lease lives on; it learns at its next renewal that this grant ended. Storage that checks tokens refuses its later writes.");
  if (!ok) return;
  try {
    await call("ForceRelease", { name, token: g.token, reason: "fence dashboard", request_id: requestID() });
    problem("force", null);
  } catch (err) {
    problem("force", err);
  }
  state.pending.add(name);
  refreshPending();
}

// ---- events ----

function describe(e) {
  const type = e.type.replace("TYPE_", "").toLowerCase().replace(/_/g, " ");
  const cause = e.cause && e.cause !== "CAUSE_UNSPECIFIED" ? " (" + e.cause.replace("CAUSE_", "").toLowerCase().replace(/_/g, " ") + ")" : "";
  const who = e.lease_number && e.lease_number !== "0" ? " " + (e.owner || "(no owner)") + " #" + e.lease_number : "";
  const tok = e.token && e.token !== "0" ? " token " + e.token : "";
  return type + cause + who + tok;
}

function renderEvents(ul, list, withName) {
  ul.replaceChildren(...list.slice().reverse().map((e) => {
    const li = document.createElement("li");
    li.className = e.type.replace("TYPE_", "ev-") + (e.cause ? " " + e.cause.replace("CAUSE_", "cause-") : "");
    li.textContent = (e.at ? new Date(e.at).toLocaleTimeString() : "@" + e.index) + "  " + (withName ? e.name + ": " : "") + describe(e);
    return li;
  }));
}

function record(e, index, live) {
  const ev = Object.assign({ index, at: live ? Date.now() : 0 }, e);
  const list = state.events.get(e.name) || [];
  list.push(ev);
  if (list.length > LOCK_EVENTS) list.shift();
  state.events.delete(e.name); // (a Map keeps the order of insertion: this name is now the latest)
  state.events.set(e.name, list);
  if (state.events.size > EVENT_LOCKS) {
    for (const name of state.events.keys()) {
      if (name !== state.selected) { state.events.delete(name); break; }
    }
  }
  state.feed.push(ev);
  if (state.feed.length > FEED_EVENTS) state.feed.shift();
}

function onWatch(msg) {
  const index = Number(msg.index);
  state.lastIndex = Math.max(state.lastIndex, index);
  for (const e of msg.events || []) {
    if (e.type === "TYPE_WRITTEN") continue;
    const live = index > state.listIndex;
    record(e, index, live);
    if (live) apply(e);
  }
  if ((msg.events || []).length) scheduleRender();
}

function setLive(on, text) {
  const el = $("live");
  el.dataset.state = on ? "on" : "off";
  el.textContent = text;
}

// watch reads /ui/api/watch from index `from` until it ends, then again
// from where it stopped.
async function watch(from) {
  if (state.watch) state.watch.abort();
  const ctl = new AbortController();
  state.watch = ctl;
  let resp;
  try {
    resp = await fetch("/ui/api/watch?prefix=&from_index=" + from, { headers: headers(false), signal: ctl.signal, cache: "no-store" });
  } catch (err) {
    if (ctl.signal.aborted) return;
    return retryWatch(err);
  }
  if (!resp.ok) {
    const err = await readError(resp);
    const c = err.detail("WatchCompacted");
    if (c) { // older than this member keeps: start at its oldest
      const oldest = Number(c.oldest_index);
      if (oldest > state.listIndex + 1) await reload();
      return watch(oldest);
    }
    return retryWatch(err);
  }
  setLive(true, "live");
  problem("watch", null);
  const reader = resp.body.getReader(), dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (event === "end") { const b = JSON.parse(data); throw new CallError(b.error.code, b); }
        onWatch(JSON.parse(data));
      }
    }
    retryWatch(new Error("the watch ended"));
  } catch (err) {
    if (!ctl.signal.aborted) retryWatch(err);
  }
}

function retryWatch(err) {
  setLive(false, "reconnecting");
  problem("watch", err);
  clearTimeout(state.rewatch);
  state.rewatch = setTimeout(() => watch(state.lastIndex ? state.lastIndex + 1 : 0), isRefusal(err) ? REFUSED_WAIT : 1000);
}

// ---- members and counters ----

async function members() {
  const note = $("mnote"), tbody = $("mtable").tBodies[0];
  try {
    const r = await call("Members", {});
    noteRefusal("members", null);
    note.hidden = true;
    tbody.replaceChildren(...(r.members || []).map((m) => {
      const tr = document.createElement("tr");
      tr.dataset.id = m.id;
      cell(tr, "id", [m.id]);
      cell(tr, "role", [m.role === "ROLE_LEADER" ? "leader" : "follower"]);
      cell(tr, "suffrage", [m.suffrage === "SUFFRAGE_LEARNER" ? "learner" : "voter"]);
      cell(tr, "addr", [m.grpc_addr || "—"]);
      cell(tr, "active", [m.role === "ROLE_LEADER" ? "—" : (m.active ? "yes" : "no")]);
      cell(tr, "lag", [String(m.lag || 0)]);
      return tr;
    }));
  } catch (err) {
    noteRefusal("members", err);
    const nl = err.detail && err.detail("NotLeader");
    note.hidden = false;
    note.textContent = nl ? "This member follows " + nl.leader_id + " (" + nl.leader_addr + "): the lock table and members are read on the leader; open the dashboard on its metrics port."
      : err.message;
    tbody.replaceChildren();
  }
}

const charts = [
  { key: "grants", label: "grants/s", rate: true },
  { key: "expirations", label: "expirations/s", rate: true },
  { key: "waiters", label: "waiters", rate: false },
  { key: "renewals_failed", label: "renewals failed/s", rate: true },
];
const samples = []; // ring of {t, stats}

function setupCharts() {
  const box = $("charts");
  for (const c of charts) {
    const div = document.createElement("div");
    div.className = "chart"; div.id = "chart-" + c.key;
    const label = document.createElement("div");
    label.className = "label";
    const name = document.createElement("span"); name.textContent = c.label;
    const value = document.createElement("span"); value.className = "value"; value.textContent = "—";
    label.append(name, value);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 " + SAMPLES + " 40");
    svg.setAttribute("preserveAspectRatio", "none");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#2f6fdf"); line.setAttribute("stroke-width", "1.5");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(line);
    div.append(label, svg);
    box.appendChild(div);
    c.value = value; c.line = line;
  }
}

function series(c) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    if (!c.rate) { out.push(b.stats[c.key]); continue; }
    const dt = (b.t - a.t) / 1000, dv = b.stats[c.key] - a.stats[c.key];
    out.push(dt > 0 && dv >= 0 ? dv / dt : 0); // a restart resets counters: no negative rate
  }
  return out;
}

function drawCharts() {
  for (const c of charts) {
    const ys = series(c);
    const max = Math.max(1, ...ys);
    const off = SAMPLES - ys.length;
    c.line.setAttribute("points", ys.map((y, i) => (off + i) + "," + (39 - (y / max) * 37).toFixed(1)).join(" "));
    const last = ys.length ? ys[ys.length - 1] : null;
    c.value.textContent = last === null ? "—" : (c.rate ? last.toFixed(1) : String(last)) + (max > 1 ? "  (max " + (c.rate ? max.toFixed(1) : max) + ")" : "");
  }
}

async function stats() {
  try {
    const resp = await fetch("/ui/api/stats", { cache: "no-store" });
    if (!resp.ok) throw await readError(resp);
    const s = await resp.json();
    $("node").textContent = s.node;
    $("leader").textContent = s.leader || "(election)";
    samples.push({ t: Date.now(), stats: s });
    if (samples.length > SAMPLES + 1) samples.shift();
    drawCharts();
    problem("stats", null);
  } catch (err) {
    problem("stats", err);
  }
}

// ---- drawing ----

let renderQueued = false;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

function render() {
  renderTable();
  renderDetail();
  renderEvents($("events"), state.feed, true);
}

// ---- start ----

function setup() {
  setupCharts();
  $("filter").addEventListener("input", (ev) => { state.filter = ev.target.value; render(); });
  // pointerdown, not click: the rows are redrawn every half second, and a
  // click whose press and release land on two drawings of a row is lost.
  $("locks").tBodies[0].addEventListener("pointerdown", (ev) => {
    const tr = ev.target.closest("tr");
    if (tr) select(tr.dataset.name);
  });
  $("dclose").addEventListener("click", () => select(null));
  $("tokenform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("fence-token", $("token").value.trim());
    $("token").value = "";
    start();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem("fence-token"); start(); });
  setInterval(render, 500);          // countdowns
  setInterval(refreshPending, 200);  // rows touched by events
  setInterval(() => { if (state.selected) { state.pending.add(state.selected); } }, 1000);
  setInterval(() => { if (!refusedLately("list")) reload(); }, 10000); // a full resync now and then
  setInterval(() => { if (!refusedLately("members")) members(); }, 2000);
  setInterval(stats, 1000);
  start();
}

async function start() {
  state.mayForce.clear();
  state.refused.clear();
  clearTimeout(state.rewatch);
  state.events.clear();
  state.feed = [];
  state.lastIndex = 0;
  $("token").placeholder = token() ? "a token is in use (this tab)" : "bearer token (optional)";
  stats();
  members();
  const index = await reload();
  watch(index === null ? 0 : Math.max(1, index + 1 - HISTORY_ENTRIES));
}

setup();
