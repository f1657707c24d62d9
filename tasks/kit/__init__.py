"""Machinery task families share (STYLE.md: a kit both import, never one family from another).

    taskfiles   the guarded loader: the one way a family reads task data it did not make
    paths       its rules, in the standard library alone (Claw-Eval's helper loads it by path)
    archives    archives checked entry by entry before anything is written
    leases      the pool of sets an episode leases outside the sandbox (services, apps, a browser)
    guard       servers that end with the process that started them
    mailstore   the Maildir mailbox (claw's IMAP/SMTP services and web's webmail serve it)
    mailfixture a mailbox as a task's fixture gives it
    checks      the base of a check, its result, and the answer check (claw and web tasks)
    browser, browser_pool, browser_session, browser_actions, browsing
                the browser stack of web, miniwob and live-web: a jailed Chromium, its pool, one
                episode's context in it, the action space as tools, the episode over them
"""
