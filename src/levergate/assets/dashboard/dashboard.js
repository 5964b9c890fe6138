// levergate dashboard: /dashboard/api/overview every `poll_seconds`, drawn with uPlot; the
// request table from /dashboard/api/requests; one request's record on a row's click.
"use strict";

(() => {
  const { api, el, fill, usd, count, pct, ms, rate, time, status } = LG;
  const charts = {};
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04",
                  "#db2777", "#4b5563", "#65a30d"];
  let session = null;
  let timer = null;
  let cursor = null;
  let bucket = 0; // the last answer's bucket (seconds): a week's range is asked for less often

  function scope() {
    const params = new URLSearchParams({ range: document.getElementById("range").value });
    for (const name of ["tenant", "model", "feature"]) {
      const value = document.getElementById("f-" + name).value.trim();
      if (value) params.set(name, value);
    }
    return params;
  }

  // One chart per element, made once and fed new columns after; `format` writes its values,
  // `axis` (or `format`) its y axis's ticks.
  function draw(id, ts, series, format, axis) {
    const node = document.getElementById(id);
    const data = [ts, ...series.map((s) => s.values)];
    const chart = charts[id];
    if (chart && chart.series.length === data.length) {
      chart.setData(data);
      return;
    }
    if (chart) chart.destroy();
    const options = {
      width: Math.max(280, node.clientWidth), height: 200,
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length],
                                             width: 1.5, spanGaps: false,
                                             points: { show: true, size: 4 },
                                             value: (u, v) => (v === null ? "–" : format(v)) }))],
      axes: [{}, { size: 70, values: (u, ticks) => ticks.map(axis || format) }],
      scales: { x: { time: true } },
    };
    charts[id] = new uPlot(options, data, node);
  }

  function row(cells, attrs = {}) {
    return el("tr", attrs, ...cells.map((c) => (c instanceof Node ? c : el("td", {}, c))));
  }

  function tiles(o) {
    const t = o.totals;
    setText("stat-requests", count(t.requests));
    setText("stat-rate", rate(t.request_rate));
    setText("stat-errors", count(t.errors));
    setText("stat-error-rate", pct(t.error_rate));
    setText("stat-spend", usd(t.cost_usd));
    setText("stat-saved", usd(t.saved_usd));
    setText("stat-counterfactual", usd(t.counterfactual_usd));
    const l = o.latency;
    setText("stat-total", [l.total_ms.p50, l.total_ms.p95, l.total_ms.p99].map(ms).join(" / "));
    setText("stat-ttft", [l.ttft_ms.p50, l.ttft_ms.p95, l.ttft_ms.p99].map(ms).join(" / "));
    setText("stat-sampled", l.sampled ? "from an even sample of the range" : "every request");
    const q = o.queue;
    setText("stat-queue", count(q.in_flight) + " / " + count(q.tenant_queued + q.queued));
    setText("stat-log-queue", "queued: tenants " + count(q.tenant_queued) + ", endpoints "
            + count(q.queued) + "; log queue " + count(q.log_queued) + ", dropped "
            + count(q.log_dropped));
    setText("pc-expected", count(t.expected_cached));
    setText("pc-read", count(t.cached_tokens));
  }

  function setText(id, text) {
    document.getElementById(id).textContent = text;
  }

  function plots(o) {
    const s = o.series;
    const l = o.latency.series;
    const plain = (v) => String(Number(v.toPrecision(3)));
    const dollars = (v) => (v < 0 ? "-$" : "$") + String(Number(Math.abs(v).toPrecision(3)));
    draw("chart-rate", s.ts, [{ label: "requests/s", values: s.rate },
                              { label: "errors", values: s.errors }], plain);
    draw("chart-total", l.ts, [50, 95, 99].map((q) => ({ label: "p" + q, values: l["total_p" + q] })), ms);
    draw("chart-ttft", l.ts, [50, 95, 99].map((q) => ({ label: "p" + q, values: l["ttft_p" + q] })), ms);
    draw("chart-spend", s.ts, [{ label: "spend", values: s.cost_usd },
                               { label: "saved", values: s.saved_usd }], usd, dollars);
    const levers = session.levers.map((lever) => ({ label: lever, values: s.savings[lever] }));
    draw("chart-levers", s.ts, levers, usd, dollars);
  }

  function tables(o) {
    const t = o.totals;
    fill(document.querySelector("#savings tbody"),
         session.levers.filter((lever) => t.savings[lever]).map((lever) =>
           row([lever, el("td", { class: "num", "data-lever": lever }, usd(t.savings[lever]))])),
         "No savings in this range.");
    fill(document.querySelector("#caches tbody"), o.caches.map((c) => row([
      c.cache, count(c.lookups), count(c.hits), count(c.coalesced),
      el("td", { class: "num hit-rate" }, pct(c.hit_rate))], { "data-cache": c.cache })),
    "No cache lookups in this range.");
    fill(document.querySelector("#errors tbody"),
         o.errors.map((e) => row([e.outcome, count(e.requests)])), "No errors in this range.");
    fill(document.querySelector("#quality tbody"), o.quality.map((q) => row([
      q.kind, q.name, pct(q.retention), q.compared === null ? "offline" : count(q.compared)])),
    "No shadow samples yet (routes and cascades with shadow sampling on).");
    fill(document.querySelector("#prompt-cache tbody"), o.prompt_cache.map((p) => row([
      p.model, count(p.prompt), count(p.expected), count(p.read), count(p.write)])),
    "No provider prompt-cache activity since start.");
    fill(document.querySelector("#models tbody"), o.models.map((m) => row([
      m.model, count(m.requests), count(m.errors), usd(m.cost_usd), usd(m.saved_usd),
      ms(m.mean_total_ms)])), "No requests in this range.");
    fill(document.querySelector("#endpoints tbody"), o.endpoints.map((e) => row([
      e.endpoint, e.up === null ? "–" : (e.up ? "up" : "ejected"), count(e.outstanding),
      count(e.queued), pct(e.quota_headroom_ratio), count(e.ejections),
      Object.entries(e.attempts).map(([k, v]) => k + " " + count(v)).join(", ") || "–"],
    { class: e.up === 0 ? "down" : "" })), "No endpoints.");
    fill(document.querySelector("#shed tbody"), o.queue.shed.map((s) => row([
      s.scope, s.priority, s.why, count(s.requests)])), "Nothing shed since start.");
  }

  async function refresh() {
    try {
      const o = await api("/dashboard/api/overview?" + scope());
      bucket = o.window.bucket_seconds;
      const note = document.getElementById("log-note");
      note.hidden = o.log.enabled;
      note.textContent = o.log.enabled ? "" : o.log.why;
      tiles(o);
      plots(o);
      tables(o);
      status("updated " + new Date().toLocaleTimeString());
    } catch (error) {
      status(error.message, true);
    }
  }

  function tableParams() {
    const params = scope();
    const outcome = document.getElementById("t-outcome").value;
    const latency = document.getElementById("t-latency").value.trim();
    if (outcome) params.set("outcome", outcome);
    if (latency) params.set("min_latency_ms", latency);
    params.set("limit", "50");
    return params;
  }

  async function requests(more = false) {
    const params = tableParams();
    if (more && cursor) params.set("cursor", cursor);
    try {
      const page = await api("/dashboard/api/requests?" + params);
      const body = document.querySelector("#requests tbody");
      const rows = page.data.map((r) => row([
        time(r.ts), r.request_id, r.tenant, r.alias || r.model, r.upstream_model || r.upstream,
        r.outcome, r.cache || "–", ms(r.total_ms), ms(r.ttft_ms),
        count(r.input_tokens + r.cached_tokens + r.cache_write_tokens) + " / " + count(r.output_tokens),
        usd(r.cost_usd), usd(r.saved_usd)], { class: "clickable", "data-request": r.request_id,
                                                onclick: () => open(r.request_id) }));
      if (more) rows.forEach((r) => body.append(r));
      else fill(body, rows, "No requests in this range.");
      cursor = page.next_cursor;
      document.getElementById("more").hidden = !page.has_more;
    } catch (error) {
      status(error.message, true);
    }
  }

  async function open(requestId) {
    try {
      const found = await api("/dashboard/api/requests/" + encodeURIComponent(requestId));
      const first = found.data[0];
      setText("record-id", requestId);
      setText("record-bodies", {
        shown: "Prompt and answer as logged (redacted, capped).",
        hidden: "Bodies were logged for this request; only the admin token sees them.",
        not_logged: "No prompt or answer text: bodies are not logged for this model.",
      }[first.bodies]);
      setText("record-json", JSON.stringify(found.data.length === 1 ? first : found.data, null, 2));
      document.getElementById("record").hidden = false;
      document.getElementById("record").scrollIntoView();
    } catch (error) {
      status(error.message, true);
    }
  }

  // Every poll_seconds, or a tenth of a bucket when that is longer (a 7-day range moves by
  // 2-hour buckets: asking every 5 s would only re-read the same week of the log).
  function schedule() {
    clearTimeout(timer);
    if (!document.getElementById("live").checked) return;
    const seconds = Math.max(session.poll_seconds, bucket / 10);
    timer = setTimeout(async () => {
      await Promise.all([refresh(), requests()]);
      schedule();
    }, seconds * 1000);
  }

  async function start() {
    try {
      session = await api("/dashboard/api/session");
    } catch (error) {
      status(error.message, true);
      return;
    }
    await Promise.all([refresh(), requests()]);
    schedule();
  }

  document.getElementById("controls").addEventListener("submit", (event) => {
    event.preventDefault();
    refresh();
    requests();
  });
  document.getElementById("range").addEventListener("change", () => { refresh(); requests(); });
  document.getElementById("live").addEventListener("change", schedule);
  document.getElementById("table-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    requests();
  });
  document.getElementById("more").addEventListener("click", () => requests(true));
  document.getElementById("record-close").addEventListener("click", () => {
    document.getElementById("record").hidden = true;
  });
  LG.setupLogin(start);
  start();
})();
