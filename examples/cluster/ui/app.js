// The status page: polls GET /cluster (same origin, read-only) and renders
// it. No framework, no build step: this file is embedded in the binary.
"use strict";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function describeWrite(w) {
  if (!w) return "none yet";
  const at = new Date(w.at).toLocaleTimeString();
  let s = at + "  " + w.resource + "  epoch " + (w.epoch || "(none)") + "  -> " + w.status;
  if (w.value) s += "\nvalue " + w.value;
  if (w.reason) s += "\n" + w.reason;
  return s;
}

function render(c) {
  document.getElementById("cluster").textContent = c.cluster;
  document.getElementById("self").textContent = c.self;

  const leader = document.getElementById("leader");
  leader.dataset.leader = c.leader || "";
  leader.dataset.term = c.leader_term || "";
  leader.replaceChildren();
  if (c.leader) {
    leader.append("node ", el("b", c.leader), " leads in term " + c.leader_term +
      (c.leader_epoch ? " with epoch " + c.leader_epoch : ""));
  } else {
    leader.textContent = "no leader known: an election is under way, or this node is cut off";
  }

  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const m of c.members) {
    const tr = el("tr");
    tr.dataset.node = m.id;
    const st = m.status;
    if (m.id === c.leader) tr.classList.add("leader");
    if (!st) tr.classList.add("unreachable");
    tr.append(
      el("td", m.id + (m.id === c.self ? " (this node)" : "")),
      el("td", st ? st.state : (m.error || "unreachable")),
      el("td", st ? String(st.term) : "?"),
      el("td", st ? (st.epoch || "—") : "?"),
      el("td", m.raft),
      el("td", m.http || "not recorded yet"));
    body.append(tr);
  }

  renderRoles(c);

  document.getElementById("store-url").textContent = c.store_url || "(no -store)";
  const err = document.getElementById("store-error");
  err.hidden = !c.store_error;
  err.textContent = c.store_error || "";
  const hb = document.querySelector("#highest tbody");
  hb.replaceChildren();
  const s = c.store;
  if (s) {
    for (const r of Object.keys(s.highest).sort()) {
      const tr = el("tr");
      tr.dataset.resource = r;
      tr.append(el("td", r), el("td", s.highest[r]));
      hb.append(tr);
    }
    document.getElementById("counts").textContent =
      "accepted " + s.accepted + ", refused " + s.refused + (s.fenced ? " (fenced, " : " (UNFENCED, ") + s.backend + ")";
    for (const [id, w] of [["last-accepted", s.last_accepted], ["last-refused", s.last_refused]]) {
      const box = document.getElementById(id);
      box.dataset.epoch = w ? (w.epoch || "") : "";
      box.querySelector("p").textContent = describeWrite(w);
    }
  }
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// renderRoles lists every role of the group (election roles): the owner
// this node's role table names, and the node that reports holding it now
// with its role epoch. A role whose owner is paused shows no holder.
function renderRoles(c) {
  const owners = {};
  const holders = {};
  for (const m of c.members) {
    const st = m.status;
    if (!st) continue;
    if (m.id === c.self && st.roles) Object.assign(owners, st.roles);
    for (const [r, ep] of Object.entries(st.held || {})) holders[r] = m.id + " (" + ep + ")";
  }
  const names = Object.keys(owners).sort();
  document.getElementById("roles-box").hidden = names.length === 0;
  const body = document.querySelector("#roles tbody");
  body.replaceChildren();
  for (const r of names) {
    const tr = el("tr");
    tr.dataset.role = r;
    tr.append(el("td", r), el("td", owners[r] || "unassigned"), el("td", holders[r] || "—"));
    body.append(tr);
  }
}

async function poll() {
  try {
    const r = await fetch("/cluster", { cache: "no-store" });
    if (r.ok) render(await r.json());
    else document.getElementById("updated").textContent = "GET /cluster: " + r.status;
  } catch (e) {
    document.getElementById("updated").textContent = "GET /cluster failed: " + e;
  }
  setTimeout(poll, 500);
}
poll();
