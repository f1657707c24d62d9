"""The personal-assistant ("claw") family: mail, calendar, todos, contacts and files, with real
services (SMTP, IMAP, CalDAV/CardDAV), one tool surface for every harness, deterministic checks."""
