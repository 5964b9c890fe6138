// levergate dashboard: what both pages share. Plain JavaScript, no build step. Every value that
// came from a client (model names, tenants, features, errors) is written with textContent,
// never as HTML.
"use strict";

const LG = (() => {
  const TOKEN = "levergate.dashboard.token";

  function token() {
    return sessionStorage.getItem(TOKEN) || "";
  }

  // A fetch with the token the viewer gave; a 401 shows the token form and stops.
  async function api(path, options = {}) {
    const headers = Object.assign({}, options.headers || {});
    if (token()) headers.Authorization = "Bearer " + token();
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (response.status === 401) {
      askToken(body && body.error ? body.error.message : "A token is needed.");
      throw new ApiError(401, "unauthorized");
    }
    if (!response.ok) {
      const message = body && body.error ? body.error.message : response.statusText;
      throw new ApiError(response.status, message);
    }
    return body;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function askToken(why) {
    const form = document.getElementById("login");
    form.hidden = false;
    document.getElementById("login-why").textContent = why;
  }

  function setupLogin(onReady) {
    const form = document.getElementById("login");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const input = document.getElementById("login-token");
      sessionStorage.setItem(TOKEN, input.value.trim());
      input.value = "";
      form.hidden = true;
      onReady();
    });
    document.getElementById("logout").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN);
      location.reload();
    });
  }

  // Elements from a tag, attributes and children (strings become text nodes).
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // A table body's rows replaced; `empty` says what an empty table means.
  function fill(tbody, rows, empty) {
    tbody.replaceChildren();
    if (!rows.length) {
      const cols = tbody.closest("table").querySelectorAll("thead th").length || 1;
      tbody.append(el("tr", { class: "empty" }, el("td", { colspan: cols }, empty)));
      return;
    }
    for (const row of rows) tbody.append(row);
  }

  // Dollars to the cent from $1 up; below, four significant digits (a cached answer saves
  // fractions of a cent, which "$0.00" would hide).
  function usd(v) {
    if (v === null || v === undefined) return "–";
    const n = Number(v);
    if (n === 0) return "$0.00";
    const places = Math.abs(n) >= 1 ? 2 : Math.min(10, 3 - Math.floor(Math.log10(Math.abs(n))));
    return (n < 0 ? "-$" : "$") + Math.abs(n).toFixed(places);
  }
  const count = (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));
  const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
  const ms = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(1) + " ms");
  const rate = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(3) + "/s");
  const time = (ts) => (ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "–");

  function status(text, bad = false) {
    const node = document.getElementById("status");
    node.textContent = text;
    node.classList.toggle("bad", bad);
  }

  return { api, ApiError, setupLogin, el, fill, usd, count, pct, ms, rate, time, status, token };
})();
