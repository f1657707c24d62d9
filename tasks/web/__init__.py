"""The web-navigation ("web") family: a jailed Chromium per worker, a fresh browser context per
episode, one BrowserGym-style action space served over the tool surface, local web apps (a shop,
a wiki, webmail, bookings) with program checks. docs/web.md."""
