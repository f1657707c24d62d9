"""orchard's chat harness: the program that runs INSIDE a sandbox (standard library only; started
as `python3 -I chat_main.py ...`). One model call: the prompt as the user's message, no tools, no
system prompt; the reply is the answer. The last stdout line is a JSON summary with the reply."""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def main(argv=None):
    parser = argparse.ArgumentParser(description="one model call, its reply printed")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    with open(args.prompt_file, encoding="utf-8") as fh:
        prompt = fh.read()
    body = {"model": args.model, "messages": [{"role": "user", "content": prompt}], "stream": False}
    request = urllib.request.Request(
        args.base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ.get('ORCHARD_API_KEY', '')}"})
    try:  # the recording proxy retries what can be retried; one failure here is the episode's
        with urllib.request.urlopen(request, timeout=args.request_timeout) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:300]
        print(json.dumps({"finish": "error", "error": f"model call failed: HTTP {exc.code}: {detail}"}))
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(json.dumps({"finish": "error", "error": f"model call failed: {exc}"}))
        return 1
    choice = (answer.get("choices") or [{}])[0]
    reply = (choice.get("message") or {}).get("content") or ""
    print(reply)
    print(json.dumps({"finish": choice.get("finish_reason") or "stop", "chars": len(reply)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
