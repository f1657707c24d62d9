"""Scripted solutions for simple MiniWoB++ tasks on a bare Playwright page (the suite's own tests,
without orchard's browser; the family's reference steps are tasks/miniwob/gold.py), written with
Playwright locators the way an agent would act (roles, labels, visible text), plus a plausible wrong action (`near_miss`) for
some, so that CI shows the suite's reward telling a solved episode from a failed one.

Each reads what it needs from the instruction (the utterance `suite.start` returned), never from
the task's hidden state.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from orchard_cli.errors import UnknownNameError, UsageError

Action = Callable[[Any, str], Awaitable[None]]
TIMEOUT_MS = 5_000
"""How long one locator action may wait; MiniWoB pages are ready at once, so a wait means a miss."""


def _match(pattern: str, utterance: str) -> tuple[str, ...]:
    found = re.fullmatch(pattern, utterance)
    if found is None:
        raise UsageError(f"the instruction {utterance!r} is not of the form {pattern!r}")
    return found.groups()


_UNCOVERED_POINT_JS = """(el) => {
  const r = el.getBoundingClientRect();
  for (let fy = 0.5; fy < 1; fy += 0.1) for (const sy of [1, -1])
    for (let fx = 0.5; fx < 1; fx += 0.1) for (const sx of [1, -1]) {
      const x = r.left + r.width * (0.5 + sx * (fx - 0.5)), y = r.top + r.height * (0.5 + sy * (fy - 0.5));
      const hit = document.elementFromPoint(x, y);
      if (hit && (hit === el || el.contains(hit))) return [x, y];
    }
  return null;
}"""


async def _click_uncovered(page: Any, locator: Any) -> None:
    """Click `locator` where it can be seen. Some tasks place elements at random and one may lie
    over another's centre, where Playwright's click would wait: a person clicks the visible part."""
    await locator.scroll_into_view_if_needed(timeout=TIMEOUT_MS)
    point = await locator.evaluate(_UNCOVERED_POINT_JS)
    if point is None:
        raise UsageError("the element is wholly covered by another: it cannot be clicked")
    await page.mouse.click(point[0], point[1])


async def _button(page: Any, name: str) -> None:
    await _click_uncovered(page, page.locator("#area").get_by_role("button", name=name, exact=True).first)


async def _submit(page: Any, name: str = "Submit") -> None:
    await _button(page, name)


# --- solutions -------------------------------------------------------------------------------

async def _click_test(page: Any, utterance: str) -> None:
    await _button(page, "Click Me!")


async def _click_test_2(page: Any, utterance: str) -> None:
    (which,) = _match(r"Click button (\w+)\.", utterance)
    await _button(page, which)


async def _click_button_sequence(page: Any, utterance: str) -> None:
    first, second = _match(r"Click button (\w+), then click button (\w+)\.", utterance)
    await _button(page, first)
    await _button(page, second)


async def _click_button(page: Any, utterance: str) -> None:
    (target,) = _match(r'Click on the "(.*)" button\.', utterance)
    await _button(page, target)


async def _click_link(page: Any, utterance: str) -> None:
    (target,) = _match(r'Click on the link "(.*)"\.', utterance)
    await page.locator("#area").get_by_text(target, exact=True).first.click(timeout=TIMEOUT_MS)


async def _enter_text(page: Any, utterance: str) -> None:
    (target,) = _match(r'Enter "(.*)" into the text field and press Submit\.', utterance)
    await page.locator("#area").get_by_role("textbox").fill(target, timeout=TIMEOUT_MS)
    await _submit(page)


async def _enter_text_2(page: Any, utterance: str) -> None:
    text, case = _match(r'Type "(.*)" in all (upper|lower) case letters in the text input and press Submit\.',
                        utterance)
    await page.locator("#area").get_by_role("textbox").fill(text.upper() if case == "upper" else text.lower(),
                                                            timeout=TIMEOUT_MS)
    await _submit(page)


async def _enter_password(page: Any, utterance: str) -> None:
    (password,) = _match(r'Enter the password "(.*)" into both text fields and press submit\.', utterance)
    await page.locator("#password").fill(password, timeout=TIMEOUT_MS)
    await page.locator("#verify").fill(password, timeout=TIMEOUT_MS)
    await _submit(page)


async def _login_user(page: Any, utterance: str) -> None:
    user, password = _match(r'Enter the username "(.*)" and the password "(.*)" into the text fields '
                            r'and press login\.', utterance)
    await page.locator("#username").fill(user, timeout=TIMEOUT_MS)
    await page.locator("#password").fill(password, timeout=TIMEOUT_MS)
    await _submit(page, "Login")


def _checkbox_names(utterance: str) -> list[str]:
    (names,) = _match(r"Select (.*) and click Submit\.", utterance)
    return [] if names == "nothing" else names.split(", ")


async def _click_checkboxes(page: Any, utterance: str) -> None:
    for name in _checkbox_names(utterance):
        await page.locator("#area").get_by_label(name, exact=True).check(timeout=TIMEOUT_MS)
    await _submit(page)


async def _click_option(page: Any, utterance: str) -> None:
    (name,) = _match(r"Select (.*) and click Submit\.", utterance)
    await page.locator("#area").get_by_label(name, exact=True).check(timeout=TIMEOUT_MS)
    await _submit(page)


async def _focus_text(page: Any, utterance: str) -> None:
    await page.locator("#area").get_by_role("textbox").click(timeout=TIMEOUT_MS)


_ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2}


async def _focus_text_2(page: Any, utterance: str) -> None:
    (nth,) = _match(r"Focus into the (1st|2nd|3rd) input textbox\.", utterance)
    await page.locator("#area").get_by_role("textbox").nth(_ORDINALS[nth]).click(timeout=TIMEOUT_MS)


async def _click_dialog(page: Any, utterance: str) -> None:
    await page.get_by_role("dialog").get_by_role("button", name="Close").click(timeout=TIMEOUT_MS)


async def _click_dialog_2(page: Any, utterance: str) -> None:
    (label,) = _match(r'Click the button in the dialog box labeled "(.*)"\.', utterance)
    name = "Close" if label == "x" else label
    await page.get_by_role("dialog").get_by_role("button", name=name, exact=True).click(timeout=TIMEOUT_MS)


async def _click_tab(page: Any, utterance: str) -> None:
    (n,) = _match(r"Click on Tab #(\d)\.", utterance)
    await page.locator("#area").get_by_text(f"Tab #{n}", exact=True).click(timeout=TIMEOUT_MS)


async def _click_collapsible(page: Any, utterance: str) -> None:
    area = page.locator("#area")
    # jQuery UI makes the section's heading a role=tab (and, by its own rule, the Submit's <p> too)
    await area.get_by_role("tab", name=re.compile(r"^Section #")).click(timeout=TIMEOUT_MS)
    await area.get_by_role("tabpanel").wait_for(state="visible", timeout=TIMEOUT_MS)
    await _submit(page)


async def _use_spinner(page: Any, utterance: str) -> None:
    (n,) = _match(r"Select (-?\d+) with the spinner and hit Submit\.", utterance)
    arrow = page.locator("#area .ui-spinner-up" if int(n) > 0 else "#area .ui-spinner-down")
    for _ in range(abs(int(n))):  # the spinner refuses typing: step it with its arrows
        await arrow.click(timeout=TIMEOUT_MS)
    await _submit(page)


SOLUTIONS: dict[str, Action] = {
    "click-button": _click_button, "click-button-sequence": _click_button_sequence,
    "click-checkboxes": _click_checkboxes, "click-collapsible": _click_collapsible,
    "click-collapsible-nodelay": _click_collapsible, "click-dialog": _click_dialog,
    "click-dialog-2": _click_dialog_2, "click-link": _click_link, "click-option": _click_option,
    "click-tab": _click_tab, "click-test": _click_test, "click-test-2": _click_test_2,
    "enter-password": _enter_password, "enter-text": _enter_text, "enter-text-2": _enter_text_2,
    "focus-text": _focus_text, "focus-text-2": _focus_text_2, "login-user": _login_user,
    "use-spinner": _use_spinner,
}


# --- near misses: what a careless agent would do ---------------------------------------------

async def _wrong_text(page: Any, utterance: str) -> None:
    (target,) = _match(r'Enter "(.*)" into the text field and press Submit\.', utterance)
    await page.locator("#area").get_by_role("textbox").fill(target.swapcase(), timeout=TIMEOUT_MS)
    await _submit(page)


async def _wrong_button(page: Any, utterance: str) -> None:
    (target,) = _match(r'Click on the "(.*)" button\.', utterance)
    others = page.locator("#area").get_by_role("button").filter(has_not_text=re.compile(f"^{re.escape(target)}$"))
    if await others.count() == 0:
        raise UsageError(f"this click-button episode has no button other than {target!r}: try another seed")
    await others.first.click(timeout=TIMEOUT_MS)


async def _wrong_other_button(page: Any, utterance: str) -> None:
    (which,) = _match(r"Click button (\w+)\.", utterance)
    await _button(page, "TWO" if which == "ONE" else "ONE")


async def _wrong_tab(page: Any, utterance: str) -> None:
    (n,) = _match(r"Click on Tab #(\d)\.", utterance)
    await page.locator("#area").get_by_text(f"Tab #{int(n) % 3 + 1}", exact=True).click(timeout=TIMEOUT_MS)


async def _wrong_checkboxes(page: Any, utterance: str) -> None:
    wanted = set(_checkbox_names(utterance))
    labels = page.locator("#area label")
    for i in range(await labels.count()):  # the instruction read backwards: every box flipped
        if (await labels.nth(i).inner_text()).strip() not in wanted:
            await labels.nth(i).get_by_role("checkbox").check(timeout=TIMEOUT_MS)
    await _submit(page)


async def _wrong_focus(page: Any, utterance: str) -> None:
    (nth,) = _match(r"Focus into the (1st|2nd|3rd) input textbox\.", utterance)
    other = (_ORDINALS[nth] + 1) % 3
    await page.locator("#area").get_by_role("textbox").nth(other).click(timeout=TIMEOUT_MS)


async def _wrong_login(page: Any, utterance: str) -> None:
    user, password = _match(r'Enter the username "(.*)" and the password "(.*)" into the text fields '
                            r'and press login\.', utterance)
    await page.locator("#username").fill(password, timeout=TIMEOUT_MS)  # the two swapped
    await page.locator("#password").fill(user, timeout=TIMEOUT_MS)
    await _submit(page, "Login")


NEAR_MISSES: dict[str, Action] = {
    "enter-text": _wrong_text, "click-button": _wrong_button, "click-test-2": _wrong_other_button,
    "click-tab": _wrong_tab, "click-checkboxes": _wrong_checkboxes, "focus-text-2": _wrong_focus,
    "login-user": _wrong_login,
}


def solvable() -> list[str]:
    """The tasks with a scripted reference solution."""
    return sorted(SOLUTIONS)


async def solve(page: Any, name: str, utterance: str) -> None:
    """Act out the reference solution of task `name` for this instruction on `page`."""
    await _lookup(SOLUTIONS, name, "solution")(page, utterance)


async def near_miss(page: Any, name: str, utterance: str) -> None:
    """Act out a plausible wrong solution (the task must end with a reward <= 0)."""
    await _lookup(NEAR_MISSES, name, "near miss")(page, utterance)


def _lookup(table: dict[str, Action], name: str, what: str) -> Action:
    if name not in table:
        raise UnknownNameError(f"no scripted {what} for MiniWoB++ task {name!r}",
                               hint=f"those with one: {', '.join(sorted(table))}")
    return table[name]
