"""The dashboard in a real browser (issue 23 §2): `levergate serve` and `levergate sim` as real
processes, known traffic sent through the official OpenAI SDK, then headless Chromium (Debian's
packages, driven by selenium) opens `/dashboard`, gives the admin token, and the numbers the page
renders — requests, errors, spend, savings, the exact cache's hit rate — are compared with what
was sent; a row of the request table opens that request's record. The keys page creates a key
(shown once), edits it, and revokes it; the key's dashboard role is checked against the API. An
empty gateway draws empty charts and no error. Screenshots go to the test's directory."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from levergate.testing.ports import free_port
from tests.browser_required import chromium
from tests.e2e.test_cli import LEVERGATE, wait_for

ADMIN = "admin-token-for-the-browser-0123"
MODEL = "gpt-4o-mini"
PATIENCE = 30.0  # seconds a page may take to show what is waited for (a bound, not a claim)
QUESTIONS = [f"Question {n}: what does the policy say about item {n}?" for n in range(6)]
REPEATED = QUESTIONS[:3]  # asked again: exact-cache hits
# A model name a client chose, logged and shown: text on the page, never markup.
HOSTILE = '<img id="xss" src="x" onerror="document.title=1">'
# What a page being redrawn under a wait may raise: the wait asks again.
_REDRAWN = (NoSuchElementException, StaleElementReferenceException)


@dataclass
class Gateway:
    root: str
    proc: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard")


@pytest.fixture(scope="module")
def gateways(home: Path) -> Iterator[dict[str, Gateway]]:
    """Two `levergate serve` processes in front of one simulator process, started together:
    `busy` (the admin API on, so the page asks for its token) and `empty` (auth off and no
    admin token: the page is open), each with its own request log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env["XDG_CACHE_HOME"] = str(home / "cache")  # the key store's file, never the user's
    started: list[tuple[int, subprocess.Popen[bytes]]] = []
    sim_port = free_port()

    def run(args: list[str], name: str) -> subprocess.Popen[bytes]:
        with (home / f"{name}.log").open("wb") as err:
            proc = subprocess.Popen([*LEVERGATE, *args], env=env, cwd=home,
                                    stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        started.append((int(args[args.index("--port") + 1]), proc))
        return proc

    def gateway(name: str, extra: str) -> Gateway:
        config = home / f"{name}.yaml"
        config.write_text(
            f"upstreams: [{{name: sim, base_url: 'http://127.0.0.1:{sim_port}/v1'}}]\n"
            f"models: [{{name: {MODEL}, upstream: sim}}]\n"
            f"request_log: {{enabled: true, flush_seconds: 0.05, "
            f"store: {{sqlite_path: '{home / name}.sqlite3'}}}}\n{extra}"
        )
        port = free_port()
        proc = run(["serve", "--config", str(config), "--port", str(port)], name)
        return Gateway(f"http://127.0.0.1:{port}", proc)

    run(["sim", "--port", str(sim_port)], "sim")
    found = {"busy": gateway("busy", f"admin: {{enabled: true, token: {ADMIN}}}\n"),
             "empty": gateway("empty", "")}  # fmt: skip
    try:
        for port, proc in started:
            wait_for(port, proc)
        yield found
    finally:
        for _, proc in started:
            proc.terminate()
        for _, proc in started:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Sent:
    requests: int
    errors: int
    cost_usd: float
    saved_usd: float
    lookups: int
    hits: int


def send_known_traffic(root: str) -> Sent:
    """Six questions (misses; two tenants), three of them again by the same tenant (exact hits:
    a tenant's entries are its own), the first once more as a stream (a hit replayed, which has
    a TTFT), an unknown model named as markup (an error, to be shown as text); what each cost
    and saved as the gateway said (x-levergate-cost-usd, -savings-usd; a stream's saving is the
    first answer's cost)."""
    cost = saved = first = 0.0
    hits = 0
    with openai.OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0) as client:
        asked = [("acme" if n < 4 else "beta", q) for n, q in enumerate(QUESTIONS)]
        for tenant, question in [*asked, *(("acme", q) for q in REPEATED)]:
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, temperature=0, max_tokens=12,
                messages=[{"role": "user", "content": question}],
                extra_headers={"x-levergate-tenant": tenant},
            )  # fmt: skip
            cost += float(raw.headers["x-levergate-cost-usd"])
            saved += float(raw.headers["x-levergate-savings-usd"])
            hits += raw.headers["x-levergate-cache"] == "hit"
            first = first or float(raw.headers["x-levergate-cost-usd"])
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, temperature=0, max_tokens=12, stream=True,
            messages=[{"role": "user", "content": QUESTIONS[0]}],
            extra_headers={"x-levergate-tenant": "acme"},
        ) as stream:  # fmt: skip
            assert stream.headers["x-levergate-cache"] == "hit"
            hits += 1
            saved += first
            assert "data: [DONE]" in "".join(stream.iter_text())
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=HOSTILE,
                                           messages=[{"role": "user", "content": "?"}])  # fmt: skip
    lookups = len(QUESTIONS) + len(REPEATED) + 1
    return Sent(lookups + 1, 1, cost, saved, lookups, hits)


def logged(root: str, count: int) -> None:
    """Until the log's writer has written `count` records (it flushes every 50 ms here)."""
    headers = {"authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=root, headers=headers) as http:
        for _ in range(600):
            if http.get("/admin/log/summary").json()["requests"] >= count:
                return
            http.get("/healthz")  # a round trip instead of a sleep
        raise AssertionError("the request log never held the traffic")


def dollars(text: str) -> float:
    found = re.fullmatch(r"(-?)\$([0-9.]+)", text.strip())
    assert found is not None, f"not a dollar figure: {text!r}"
    return float(found[2]) * (-1 if found[1] else 1)


def wait(
    driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], object], what: str
) -> None:
    def holds(d: webdriver.Chrome) -> object:
        return condition(d)

    try:
        WebDriverWait(driver, PATIENCE, ignored_exceptions=_REDRAWN).until(holds)
    except Exception as exc:
        status = driver.find_element(By.ID, "status").text
        raise AssertionError(f"{what} never showed (page status: {status!r})") from exc


def text(driver: webdriver.Chrome, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def console(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """What the pages wrote to the browser's console since the last read."""
    found: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return found


def log_in(driver: webdriver.Chrome, token: str) -> None:
    wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed(), "the token form")
    driver.find_element(By.ID, "login-token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def busy(gateways: dict[str, Gateway]) -> tuple[Gateway, Sent]:
    gateway = gateways["busy"]
    sent = send_known_traffic(gateway.root)
    logged(gateway.root, sent.requests)
    return gateway, sent


def test_the_page_shows_the_numbers_of_the_traffic_sent(
    browser: webdriver.Chrome, busy: tuple[Gateway, Sent], home: Path
) -> None:
    gateway, sent = busy
    assert sent.hits == len(REPEATED) + 1
    browser.get(f"{gateway.root}/dashboard")
    log_in(browser, ADMIN)
    want = str(sent.requests)
    wait(browser, lambda d: text(d, "#stat-requests") == want, f"{want} requests")
    Select(browser.find_element(By.ID, "range")).select_by_value("5m")
    wait(browser, lambda d: "updated" in text(d, "#status"), "a refresh over 5 minutes")
    assert text(browser, "#stat-requests") == want
    assert text(browser, "#stat-errors") == str(sent.errors)
    assert dollars(text(browser, "#stat-spend")) == pytest.approx(sent.cost_usd, rel=1e-3)
    assert dollars(text(browser, "#stat-saved")) == pytest.approx(sent.saved_usd, rel=1e-3)
    assert sent.saved_usd > 0
    exact = dollars(text(browser, "#savings [data-lever=exact]"))
    assert exact == pytest.approx(sent.saved_usd, rel=1e-3)
    hit_rate = text(browser, "#caches tr[data-cache=exact] .hit-rate")
    assert hit_rate == f"{100 * sent.hits / sent.lookups:.1f}%"
    assert len(browser.find_elements(By.CSS_SELECTOR, ".chart .uplot")) == 5
    assert "invalid_request_error" in text(browser, "#errors tbody")
    assert HOSTILE in text(browser, "#models tbody")  # shown as the text it is
    assert browser.find_elements(By.ID, "xss") == []
    assert browser.title == "levergate dashboard"
    assert text(browser, "#stat-ttft").count("ms") == 3  # the stream's
    browser.save_screenshot(str(home / "dashboard.png"))

    rows = browser.find_elements(By.CSS_SELECTOR, "#requests tbody tr.clickable")
    assert len(rows) == sent.requests
    request_id = str(rows[-1].get_attribute("data-request"))
    rows[-1].click()
    wait(browser, lambda d: d.find_element(By.ID, "record").is_displayed(), "the record")
    assert request_id in text(browser, "#record-json")
    assert "not logged" in text(browser, "#record-bodies")

    Select(browser.find_element(By.ID, "t-outcome")).select_by_value("error")
    browser.find_element(By.CSS_SELECTOR, "#table-filters button[type=submit]").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#requests tbody tr")) == 1,
         "the errors only")  # fmt: skip
    assert "invalid_request_error" in text(browser, "#requests tbody")


def key_row(driver: webdriver.Chrome, key_id: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f"#keys tr[data-key='{key_id}']")


def test_the_keys_page_creates_edits_and_revokes_a_key(
    browser: webdriver.Chrome, busy: tuple[Gateway, Sent], home: Path
) -> None:
    gateway, _ = busy
    browser.get(f"{gateway.root}/dashboard/keys")
    if browser.find_element(By.ID, "login").is_displayed():  # a fresh tab: the token again
        log_in(browser, ADMIN)
    wait(browser, lambda d: "loaded" in text(d, "#status"), "the key list")
    form = browser.find_element(By.ID, "create")
    for name, value in (("tenant", "acme"), ("name", "browser-key"), ("daily_budget_usd", "5")):
        form.find_element(By.NAME, name).send_keys(value)
    form.find_element(By.NAME, "dashboard").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_element(By.ID, "new-key").is_displayed(), "the new key")
    key, key_id = text(browser, "#new-key-value"), text(browser, "#new-key-id")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-key='{key_id}']"), "its row")
    row = key_row(browser, key_id)
    assert "browser-key" in row.text
    assert "dashboard" in row.text
    assert "$5.00 " in row.text
    tenants = text(browser, "#tenants tbody")
    assert "acme" in tenants
    assert "beta" in tenants
    browser.save_screenshot(str(home / "keys.png"))

    with httpx.Client(base_url=gateway.root) as http:
        session = http.get("/dashboard/api/session", headers={"authorization": f"Bearer {key}"})
        assert session.json()["viewer"] == "reader"

        row.find_element(By.CSS_SELECTOR, "button.edit").click()
        edit = browser.find_element(By.ID, "edit")
        edit.find_element(By.NAME, "rpm").send_keys("60")
        edit.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait(browser, lambda d: "saved" in text(d, "#status"), "the edit saved")
        assert key_row(browser, key_id).find_elements(By.XPATH, "td[text()='60']")

        revoke = key_row(browser, key_id).find_element(By.CSS_SELECTOR, "button.revoke")
        revoke.click()
        revoke.click()  # the second click confirms
        wait(browser, lambda d: "revoked" in key_row(d, key_id).text, "the key revoked")
        refused = http.get("/dashboard/api/session", headers={"authorization": f"Bearer {key}"})
        assert refused.status_code == 401


def test_an_empty_gateway_draws_empty_charts_and_no_error(
    browser: webdriver.Chrome, gateways: dict[str, Gateway], home: Path
) -> None:
    """Auth off and no admin token: the page is open, and with no request yet every chart is
    drawn empty, every table says it is empty, and the status is not an error."""
    gateway = gateways["empty"]
    console(browser)  # read, and so cleared: what the pages before logged
    browser.get(f"{gateway.root}/dashboard")
    wait(browser, lambda d: "updated" in text(d, "#status"), "the first refresh")
    assert not browser.find_element(By.ID, "login").is_displayed()
    assert text(browser, "#stat-requests") == "0"
    assert text(browser, "#stat-spend") == "$0.00"
    assert len(browser.find_elements(By.CSS_SELECTOR, ".chart .uplot")) == 5
    assert text(browser, "#requests tbody") == "No requests in this range."
    assert "bad" not in str(browser.find_element(By.ID, "status").get_attribute("class"))
    assert [e for e in console(browser) if e["level"] == "SEVERE"] == []
    browser.save_screenshot(str(home / "empty.png"))
