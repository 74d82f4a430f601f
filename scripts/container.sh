#!/usr/bin/env bash
# Build the Dockerfile on a base image made from Debian's own packages, run it, and check from outside that the page
# and a short run answer. No image registry needed: the base comes from a Debian mirror through debootstrap.
# Run as root with podman and debootstrap installed (apt-get install podman debootstrap runc):
#
#   scripts/container.sh        (or: make image)
#
# Settings from the environment [defaults]:
#   SUITE [bookworm], MIRROR [http://deb.debian.org/debian]   the Debian the base image is made from
#   BASE_IMAGE [localhost/specscope-base:$SUITE]               made once and kept; REBUILD_BASE=1 makes it again
#   IMAGE [localhost/specscope:check]                          built from the Dockerfile; removed at the end unless KEEP_IMAGE=1
#   WHEELS [$PIP_FIND_LINKS when it is a folder]               a folder of wheels mounted at build time; torch comes from it
#   TORCH_PIP_ARGS [--find-links /wheels with WHEELS, else the Dockerfile's default]
#   PORT [18000]                                               the host port the container is published on (127.0.0.1 only)
#   CHECK_PYTHON [.venv/bin/python, else python3]              runs scripts/check_server.py (needs `websockets`)
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=${BASE_IMAGE:-localhost/specscope-base:$SUITE}
IMAGE=${IMAGE:-localhost/specscope:check}
PORT=${PORT:-18000}
if [[ -z ${WHEELS+set} && -d ${PIP_FIND_LINKS:-} ]]; then WHEELS=$PIP_FIND_LINKS; fi
WHEELS=${WHEELS:-}
if [[ -z ${CHECK_PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then CHECK_PYTHON=.venv/bin/python; else CHECK_PYTHON=python3; fi
fi
CONTAINER=specscope-check-$$

STEP="start"
ROOTFS=""
IMAGES_BEFORE=""
PODMAN=(podman)
RUN_OPTS=()
TIMES=()

fail() { echo "container.sh: $*" >&2; exit 1; }
step() { STEP=$1; STEP_STARTED=$SECONDS; echo "== $STEP"; }
done_step() {
    local taken=$((SECONDS - STEP_STARTED))
    TIMES+=("$(printf '%5d s  %s' "$taken" "$STEP")")
    echo "   ($taken s)"
}

cleanup() {
    local status=$?
    trap - EXIT
    if [[ $status -ne 0 ]]; then echo "container.sh: FAILED at \"$STEP\" (exit $status)" >&2; fi
    if "${PODMAN[@]}" container exists "$CONTAINER" 2>/dev/null; then
        if [[ $status -ne 0 ]]; then echo "-- container log:" >&2; "${PODMAN[@]}" logs --tail 40 "$CONTAINER" >&2 || true; fi
        "${PODMAN[@]}" rm -f -t 5 "$CONTAINER" >/dev/null || echo "container.sh: could not remove container $CONTAINER" >&2
    fi
    if [[ ${KEEP_IMAGE:-0} != 1 ]]; then
        if "${PODMAN[@]}" image exists "$IMAGE" 2>/dev/null; then
            "${PODMAN[@]}" rmi -f "$IMAGE" >/dev/null || echo "container.sh: could not remove image $IMAGE" >&2
        fi
        remove_new_untagged_images
    fi
    remove_rootfs
    exit $status
}
trap cleanup EXIT

# A failed build leaves its finished steps behind as untagged images: remove those this run made (removing the
# last one of a chain removes its untagged parents).
remove_new_untagged_images() {
    [[ -n $IMAGES_BEFORE ]] || return 0
    local id
    for id in $(comm -13 <(echo "$IMAGES_BEFORE") <("${PODMAN[@]}" images -q --no-trunc --filter dangling=true | sort -u)); do
        "${PODMAN[@]}" rmi "$id" >/dev/null || echo "container.sh: could not remove image $id" >&2
    done
}

remove_rootfs() {
    [[ -n $ROOTFS && -d $ROOTFS ]] || return 0
    # A failed debootstrap can leave /proc and /sys mounted inside: unmount, and never cross into another filesystem.
    local mount
    for mount in $(findmnt -rn -o TARGET | grep -F "$ROOTFS/" | sort -r); do umount -l "$mount"; done
    rm -rf --one-file-system "$ROOTFS"
    ROOTFS=""
}

need() { command -v "$1" >/dev/null || fail "$1 is not installed (apt-get install $2)"; }

make_base_image() {
    step "debootstrap $SUITE"
    [[ $EUID -eq 0 ]] || fail "debootstrap needs root"
    need debootstrap debootstrap
    ROOTFS=$(mktemp -d /var/tmp/specscope-rootfs.XXXXXX)
    chmod 755 "$ROOTFS"  # becomes the image's /: mktemp's 0700 would lock every user but root out
    debootstrap --variant=minbase --include=python3,python3-venv,make,ca-certificates \
        "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
        || { tail -20 "$ROOTFS.log" >&2; rm -f "$ROOTFS.log"; fail "debootstrap $SUITE from $MIRROR"; }
    rm -f "$ROOTFS.log"
    # Trust what this host trusts, so that builds behind a TLS-inspecting proxy reach PyPI (pip reads /etc/pip.conf).
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
        printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$ROOTFS/etc/pip.conf"
    fi
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    done_step

    step "import $BASE_IMAGE"
    local old_base
    old_base=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)
    tar -C "$ROOTFS" --numeric-owner -c . | "${PODMAN[@]}" import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    remove_rootfs
    if [[ -n $old_base && $old_base != "$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE")" ]]; then
        podman rmi "$old_base" >/dev/null || echo "   (the old base image $old_base is still in use)"
    fi
    done_step
}

# Podman's defaults do not run everywhere: crun refuses hybrid cgroup v1/v2 hosts (runc copes), and without
# CAP_SYS_RESOURCE the runtime may not raise the open-files and processes limits to podman's defaults.
choose_podman_options() {
    step "find podman options that run a container here"
    local nofile nproc
    nofile=$(ulimit -Hn); [[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
    nproc=4096  # per user id; the app is one process with a few threads
    local limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    local global run
    for global in "" "--runtime runc"; do
        for run in "" "${limits[*]}"; do
            # shellcheck disable=SC2086  # the option strings split on purpose
            if podman $global run --rm $run "$BASE_IMAGE" true 2>/dev/null; then
                read -ra PODMAN <<<"podman $global"
                read -ra RUN_OPTS <<<"$run"
                echo "   podman options: ${PODMAN[*]:1} ${RUN_OPTS[*]}"
                done_step
                return
            fi
        done
    done
    podman run --rm "$BASE_IMAGE" true || true  # show podman's own complaint
    fail "no podman configuration ran a container from $BASE_IMAGE"
}

build_image() {
    step "build $IMAGE"
    IMAGES_BEFORE=$("${PODMAN[@]}" images -aq --no-trunc | sort -u)
    local args=(--format docker --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE")
    if [[ -n $WHEELS ]]; then
        [[ -d $WHEELS ]] || fail "WHEELS=$WHEELS is not a folder"
        args+=(-v "$(realpath "$WHEELS"):/wheels:ro")
        TORCH_PIP_ARGS=${TORCH_PIP_ARGS:---find-links /wheels}
    fi
    if [[ -n ${TORCH_PIP_ARGS:-} ]]; then args+=(--build-arg "TORCH_PIP_ARGS=$TORCH_PIP_ARGS"); fi
    # --format docker keeps the HEALTHCHECK (the OCI format has none).
    "${PODMAN[@]}" build "${args[@]}" . || fail "podman build"
    "${PODMAN[@]}" image inspect "$IMAGE" --format '   image size: {{.Size}} bytes'
    done_step
}

run_and_check() {
    step "run $IMAGE and check it from outside"
    # Without systemd podman logs that it cannot time the HEALTHCHECK; harmless: it is run by hand below.
    "${PODMAN[@]}" run -d --name "$CONTAINER" "${RUN_OPTS[@]}" -p "127.0.0.1:$PORT:8000" "$IMAGE" >/dev/null \
        || fail "podman run"
    "$CHECK_PYTHON" scripts/check_server.py "http://127.0.0.1:$PORT" --wait 300 \
        || fail "the server in the container did not pass scripts/check_server.py"
    "${PODMAN[@]}" healthcheck run "$CONTAINER" || fail "the image's HEALTHCHECK"
    echo "   HEALTHCHECK: healthy"
    done_step

    step "specscope generate inside the container"
    local summary
    summary=$("${PODMAN[@]}" exec "$CONTAINER" specscope generate "Count from one to ten." --policy talon \
        --compare ar --max-new-tokens 16 --dtype float32 --json) || fail "podman exec specscope generate"
    "$CHECK_PYTHON" - "$summary" <<'EOF' || fail "specscope generate's output"
import json, sys
summary = json.loads(sys.argv[1].strip().splitlines()[-1])
assert summary["new_tokens"] > 0, summary
assert summary["compare"]["identical"], "talon's greedy output differs from plain decoding in float32"
print(f"   talon {summary['new_tokens']} tokens, tau={summary['tau']:.2f}, identical to ar: {summary['text']!r}")
EOF
    done_step

    step "stop the container"
    "${PODMAN[@]}" stop -t 10 "$CONTAINER" >/dev/null || fail "podman stop"
    "${PODMAN[@]}" rm "$CONTAINER" >/dev/null || fail "podman rm"
    done_step
}

need podman podman
"$CHECK_PYTHON" -c "import websockets" 2>/dev/null || fail "$CHECK_PYTHON cannot import websockets (make install, or set CHECK_PYTHON)"
if [[ ${REBUILD_BASE:-0} == 1 ]] || ! podman image exists "$BASE_IMAGE"; then
    make_base_image
else
    echo "== $BASE_IMAGE exists (REBUILD_BASE=1 makes it again)"
fi
choose_podman_options
build_image
run_and_check
STEP="done"
echo "container.sh: all checks passed. Seconds per step:"
printf '   %s\n' "${TIMES[@]}"
