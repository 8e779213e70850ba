#!/bin/bash
# controlplane agent image boot script (run by det-agent-boot.service once at boot).
# Fetches this instance's user data from the metadata server and runs it with bash:
#   aws: IMDSv2 (PUT /latest/api/token, then GET /latest/user-data with the token);
#   gcp: GET /computeMetadata/v1/instance/attributes/startup-script with Metadata-Flavor: Google.
# The cloud is the first argument or DET_IMAGE_CLOUD (the bake writes it to /opt/controlplane/image.env);
# DET_METADATA_URL overrides the metadata server's address (tests), as the agent's boot script allows.
set -euo pipefail
CLOUD="${1:-${DET_IMAGE_CLOUD:-}}"
RUN_DIR="${DET_IMAGE_BOOT_DIR:-/run/controlplane}"
# The network may come up a little after network-online: retry refused connections, not 404s.
CURL=(curl -fsS --retry 30 --retry-delay 2 --retry-connrefused --connect-timeout 2 --max-time 30)

umask 077  # the user data carries the cluster's join token
mkdir -p "$RUN_DIR"
SCRIPT="$RUN_DIR/user-data.sh"
case "$CLOUD" in
  aws)
    BASE="${DET_METADATA_URL:-http://169.254.169.254}"
    TOKEN="$("${CURL[@]}" -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$BASE/latest/api/token")"
    URL="$BASE/latest/user-data"
    HEADER="X-aws-ec2-metadata-token: $TOKEN"
    ;;
  gcp)
    BASE="${DET_METADATA_URL:-http://metadata.google.internal}"
    URL="$BASE/computeMetadata/v1/instance/attributes/startup-script"
    HEADER='Metadata-Flavor: Google'
    ;;
  *)
    echo "det-image-boot: the cloud must be aws or gcp (argument or DET_IMAGE_CLOUD), got '$CLOUD'" >&2
    exit 2
    ;;
esac
if ! "${CURL[@]}" -H "$HEADER" -o "$SCRIPT" "$URL"; then
  echo "det-image-boot: could not read the instance's boot script from $URL: nothing to run" >&2
  exit 1
fi
echo "det-image-boot: running the instance's boot script from $URL"
exec bash "$SCRIPT"
