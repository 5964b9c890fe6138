// levergate keys page: the admin API (/admin/keys) in a browser, on the admin token. A new or
// rotated key is shown once, as the API returns it once; spend per key and per tenant comes
// from the request log (/dashboard/api/spend) and the budgets' own counters (/admin/keys/{id}/spend).
"use strict";

(() => {
  const { api, ApiError, el, fill, usd, count, time, status } = LG;
  const NUMBERS = ["rpm", "tpm", "daily_budget_usd", "monthly_budget_usd"];
  let editing = null;

  function field(form, name) {
    return form.elements.namedItem(name);
  }

  // The form's policy fields as the admin API takes them: empty means none (null).
  function policy(form) {
    const body = { name: field(form, "name").value.trim() };
    const models = field(form, "models").value.split(",").map((m) => m.trim()).filter(Boolean);
    body.models = models;
    for (const name of NUMBERS) {
      const text = field(form, name).value.trim();
      body[name] = text === "" ? null : (Number.isNaN(Number(text)) ? text : Number(text));
    }
    body.roles = field(form, "dashboard").checked ? ["dashboard"] : [];
    return body;
  }

  function showKey(record) {
    document.getElementById("new-key-id").textContent = record.id;
    document.getElementById("new-key-value").textContent = record.key;
    document.getElementById("new-key").hidden = false;
  }

  async function spendOf(record) {
    if (record.revoked) return null;
    try {
      return await api("/admin/keys/" + encodeURIComponent(record.id) + "/spend");
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }
  }

  function actions(record) {
    if (record.revoked || record.source === "config") return el("td", {}, record.source === "config" ? "from the file" : "");
    const revoke = el("button", { type: "button", class: "revoke" }, "Revoke");
    revoke.addEventListener("click", async () => {
      if (revoke.dataset.armed !== "1") {
        revoke.dataset.armed = "1";
        revoke.textContent = "Confirm revoke";
        return;
      }
      await act(() => api("/admin/keys/" + encodeURIComponent(record.id) + "/revoke", { method: "POST", body: "{}" }),
                "revoked " + record.id);
    });
    const rotate = el("button", { type: "button", class: "rotate" }, "Rotate");
    rotate.addEventListener("click", () => act(async () => {
      showKey(await api("/admin/keys/" + encodeURIComponent(record.id) + "/rotate", { method: "POST", body: "{}" }));
    }, "rotated " + record.id));
    const edit = el("button", { type: "button", class: "edit" }, "Edit");
    edit.addEventListener("click", () => startEdit(record));
    return el("td", {}, edit, " ", rotate, " ", revoke);
  }

  // `inRange`: the key's line of the spend list; none is $0.00 unless the list was cut short.
  function keyRow(record, spend, inRange, cut) {
    const budget = (v) => (v === null || v === undefined ? "none" : usd(v));
    const spent = (period) => (spend ? usd(spend[period].spent_usd) : "–");
    return el("tr", { "data-key": record.id, class: record.revoked ? "revoked" : "" },
      el("td", {}, record.id), el("td", {}, record.name), el("td", {}, record.tenant),
      el("td", {}, record.hint), el("td", {}, record.models.join(", ") || "all"),
      el("td", {}, (record.roles || []).join(", ") || "–"),
      el("td", {}, record.rpm ?? "–"), el("td", {}, record.tpm ?? "–"),
      el("td", {}, budget(record.daily_budget_usd)), el("td", {}, budget(record.monthly_budget_usd)),
      el("td", { class: "num" }, spent("day")), el("td", { class: "num" }, spent("month")),
      el("td", { class: "num spend" }, inRange ? usd(inRange.cost_usd) : (cut ? "–" : usd(0))),
      el("td", { class: "state" }, record.revoked ? "revoked " + time(record.revoked) : "active"),
      actions(record));
  }

  async function load() {
    const range = document.getElementById("range").value;
    const [keys, spend] = await Promise.all([
      api("/admin/keys"), api("/dashboard/api/spend?range=" + encodeURIComponent(range))]);
    const byKey = Object.fromEntries(spend.keys.map((k) => [k.key_id, k]));
    const budgets = await Promise.all(keys.data.map(spendOf));
    fill(document.querySelector("#keys tbody"),
         keys.data.map((r, i) => keyRow(r, budgets[i], byKey[r.id], spend.keys_truncated)), "No keys yet.");
    fill(document.querySelector("#tenants tbody"), spend.tenants.map((t) => el("tr", { "data-tenant": t.tenant },
      el("td", {}, t.tenant), el("td", {}, count(t.requests)), el("td", {}, count(t.errors)),
      el("td", { class: "num" }, usd(t.cost_usd)), el("td", { class: "num" }, usd(t.saved_usd)))),
    spend.log.enabled ? "No requests in this range." : "The request log is off.");
    status("updated " + new Date().toLocaleTimeString());
  }

  async function act(work, done) {
    try {
      await work();
      await load();
      status(done);
    } catch (error) {
      status(error.message, true);
    }
  }

  function startEdit(record) {
    editing = record.id;
    const form = document.getElementById("edit");
    document.getElementById("edit-id").textContent = record.id;
    field(form, "name").value = record.name;
    field(form, "models").value = record.models.join(", ");
    for (const name of NUMBERS) field(form, name).value = record[name] ?? "";
    field(form, "dashboard").checked = (record.roles || []).includes("dashboard");
    form.hidden = false;
  }

  async function start() {
    let session;
    try {
      session = await api("/dashboard/api/session");
    } catch (error) {
      status(error.message, true);
      return;
    }
    const note = document.getElementById("admin-note");
    if (!session.admin_api) {
      note.hidden = false;
      note.textContent = session.viewer === "admin"
        ? "The admin API is off (admin.enabled): keys cannot be listed or made here."
        : "The keys page needs the admin token (and admin.enabled).";
      status("read-only", true);
      return;
    }
    note.hidden = true;
    await act(load, "loaded");
  }

  document.getElementById("create").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const body = { tenant: field(form, "tenant").value.trim(), ...policy(form) };
    act(async () => {
      showKey(await api("/admin/keys", { method: "POST", body: JSON.stringify(body) }));
      form.reset();
    }, "created a key for " + body.tenant);
  });
  document.getElementById("edit").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = event.target;
    const id = editing;
    act(async () => {
      await api("/admin/keys/" + encodeURIComponent(id), { method: "POST", body: JSON.stringify(policy(form)) });
      form.hidden = true;
    }, "saved " + id);
  });
  document.getElementById("edit-cancel").addEventListener("click", () => {
    document.getElementById("edit").hidden = true;
  });
  document.getElementById("new-key-done").addEventListener("click", () => {
    document.getElementById("new-key").hidden = true;
    document.getElementById("new-key-value").textContent = "";
  });
  document.getElementById("range").addEventListener("change", () => act(load, "loaded"));
  LG.setupLogin(start);
  start();
})();
