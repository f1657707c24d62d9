#!/bin/bash
set -e
[ -x /app/hello.sh ] && [ "$(/app/hello.sh)" = "hello harbor" ]
