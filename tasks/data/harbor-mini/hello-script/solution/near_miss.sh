#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
printf '#!/bin/sh\necho hello harbor\n' > /app/hello.sh
