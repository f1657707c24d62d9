#!/bin/bash
set -e
printf '#!/bin/sh\necho hello harbor\n' > /app/hello.sh && chmod +x /app/hello.sh
