#!/bin/bash
# A loopback-only Kubernetes API server (kube-apiserver + etcd) for the `k8s`-marked tests.
#
#   scripts/k8s-apiserver.sh build    # once: Debian's `kubernetes` source package, built with Debian's Go
#   scripts/k8s-apiserver.sh start    # builds if needed, starts etcd + kube-apiserver, writes a kubeconfig
#   scripts/k8s-apiserver.sh status   # exit 0 when the API server answers
#   scripts/k8s-apiserver.sh stop     # stops both; removes nothing that `build` made
#   scripts/k8s-apiserver.sh env      # prints `export KUBECONFIG=...` for the k8s suite
#   scripts/k8s-apiserver.sh clean    # removes what only the build needs (keeps the binary)
#
# Every step is idempotent. Nothing listens beyond 127.0.0.1, and nothing else is started: no kubelet (its
# cloud credential provider probes a metadata address outside 127.0.0.0/8), no controller manager, no
# scheduler, no cloud provider. Pods are stored by the API server but never run.
#
# State lives under $OPENFORGE_K8S_DIR (default ~/.cache/openforge/k8s-apiserver): src/ (the Debian source
# tree), gopath/, gocache/, bin/kube-apiserver, pki/, run/ (etcd data, logs, pids), kubeconfig.
# The build needs root (apt-get) once; a cold build took ~11 min on 2 idle cores (1.3 GB peak memory).
set -euo pipefail

K8SX=${OPENFORGE_K8S_DIR:-$HOME/.cache/openforge/k8s-apiserver}
ETCD_PORT=${OPENFORGE_K8S_ETCD_PORT:-23790}
PEER_PORT=${OPENFORGE_K8S_ETCD_PEER_PORT:-23800}
API_PORT=${OPENFORGE_K8S_API_PORT:-16443}
VERSION=v1.20.2
RUN=$K8SX/run
APISERVER=$K8SX/bin/kube-apiserver

say() { echo "k8s-apiserver: $*" >&2; }
die() { say "$*"; exit 1; }

ensure_deb_src() {
    # apt-get source needs a deb-src entry; add one mirroring the Debian entries already configured.
    if grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ || grep -qs '^deb-src ' /etc/apt/sources.list; then
        return
    fi
    local src=/etc/apt/sources.list.d/debian.sources
    [ -f "$src" ] || die "no deb-src entry and no $src to copy one from: add a deb-src line for Debian by hand"
    sed 's/^Types: deb$/Types: deb-src/' "$src" > /etc/apt/sources.list.d/openforge-deb-src.sources
    apt-get update -qq
}

ensure_packages() {
    command -v go >/dev/null && command -v etcd >/dev/null && return
    [ "$(id -u)" = 0 ] || die "golang-go and etcd-server are missing; install them as root (apt-get install golang-go etcd-server)"
    apt-get install -y -qq --no-install-recommends golang-go etcd-server >/dev/null
}

ensure_source() {
    [ -f "$K8SX/src/k8s/cmd/kube-apiserver/apiserver.go" ] && return
    ensure_deb_src
    mkdir -p "$K8SX/src"
    (cd "$K8SX/src" && apt-get source --download-only kubernetes >/dev/null)
    rm -rf "$K8SX/src/k8s"
    (cd "$K8SX/src" && dpkg-source -x kubernetes_*.dsc k8s >/dev/null)
}

go_env() {
    export GOCACHE=$K8SX/gocache GOPATH=$K8SX/gopath GO111MODULE=off CGO_ENABLED=0 GOPROXY=off
    mkdir -p "$K8SX/gopath/src/k8s.io"
    [ -L "$K8SX/gopath/src/k8s.io/kubernetes" ] || ln -s "$K8SX/src/k8s" "$K8SX/gopath/src/k8s.io/kubernetes"
    cd "$K8SX/gopath/src/k8s.io/kubernetes"
}

gen_openapi() {
    # 1.20's source tarball lacks pkg/generated/openapi; its `make` generates it before building.
    [ -f "$K8SX/src/k8s/pkg/generated/openapi/zz_generated.openapi.go" ] && return
    (
        go_env
        nice -n 19 go build -o "$K8SX/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
        local dirs
        dirs=$(find -L pkg cmd plugin vendor -name '*.go' -not -path 'vendor/k8s.io/code-generator/*' \
                   -not -path 'vendor/k8s.io/sample-apiserver/*' -print0 \
               | { xargs -0 grep -l '^// *+k8s:openapi-gen=' || true; } | xargs -n1 dirname | LC_ALL=C sort -u \
               | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
        nice -n 19 "$K8SX/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
            -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
            -r "$K8SX/openapi-violations.report" 2>"$K8SX/openapi-gen.log"
    )
}

build_apiserver() {
    [ -x "$APISERVER" ] && return
    (
        go_env
        local p=k8s.io/kubernetes/vendor
        local v="-X $p/k8s.io/component-base/version.gitVersion=$VERSION -X $p/k8s.io/component-base/version.gitMajor=1"
        v="$v -X $p/k8s.io/component-base/version.gitMinor=20 -X $p/k8s.io/component-base/version.gitTreeState=clean"
        v="$v -X $p/k8s.io/client-go/pkg/version.gitVersion=$VERSION"
        mkdir -p "$K8SX/bin"
        nice -n 19 go build -trimpath -ldflags "-s -w $v" -o "$APISERVER.tmp" ./cmd/kube-apiserver
        mv "$APISERVER.tmp" "$APISERVER"
    )
}

cmd_build() {
    if [ -x "$APISERVER" ]; then
        say "built $("$APISERVER" --version)"
        return
    fi
    ensure_packages
    ensure_source
    gen_openapi
    build_apiserver
    say "built $("$APISERVER" --version)"
}

make_pki() {
    local d=$K8SX/pki
    [ -f "$d/tokens.csv" ] && return
    mkdir -p "$d" && chmod 700 "$d"
    (
        cd "$d"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 -subj /CN=openforge-k8s-ca 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,IP:10.0.0.1\n' > san.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
            -days 365 -extfile san.ext 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        echo "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'),admin,admin,system:masters" > tokens.csv.tmp
        mv tokens.csv.tmp tokens.csv
    )
}

write_kubeconfig() {
    local token
    token=$(cut -d, -f1 "$K8SX/pki/tokens.csv")
    umask 077
    cat > "$K8SX/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: openforge-loopback
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $K8SX/pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: openforge-loopback
  context: {cluster: openforge-loopback, user: admin}
current-context: openforge-loopback
EOF
}

alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

api_ready() {
    local token
    token=$(cut -d, -f1 "$K8SX/pki/tokens.csv" 2>/dev/null) || return 1
    curl -fsS --max-time 3 --cacert "$K8SX/pki/ca.crt" -H "Authorization: Bearer $token" \
        "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1
}

start_etcd() {
    alive etcd && return
    nice -n 10 etcd --name openforge --data-dir "$RUN/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
        --initial-cluster "openforge=http://127.0.0.1:$PEER_PORT" \
        >"$RUN/etcd.log" 2>&1 &
    echo $! >"$RUN/etcd.pid"
}

start_apiserver() {
    alive apiserver && return
    local p=$K8SX/pki
    # --insecure-port=0: 1.20 would otherwise open an unauthenticated port. No --cloud-provider, and the
    # API server never dials a kubelet here (nothing registers a node).
    nice -n 10 "$APISERVER" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" --insecure-port=0 \
        --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
        --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" --authorization-mode=Node,RBAC \
        --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$p/sa.pub" \
        --service-account-signing-key-file="$p/sa.key" --api-audiences=https://kubernetes.default.svc \
        --service-cluster-ip-range=10.0.0.0/24 --endpoint-reconciler-type=none --allow-privileged=false \
        --kubelet-preferred-address-types=Hostname --cert-dir="$RUN/certs" \
        >"$RUN/apiserver.log" 2>&1 &
    echo $! >"$RUN/apiserver.pid"
}

cmd_start() {
    [ -x "$APISERVER" ] || cmd_build
    command -v etcd >/dev/null || die "etcd is missing (apt-get install etcd-server)"
    make_pki
    write_kubeconfig
    mkdir -p "$RUN"
    start_etcd
    start_apiserver
    local i
    for i in $(seq 1 120); do
        if api_ready; then
            say "ready at https://127.0.0.1:$API_PORT ($VERSION); KUBECONFIG=$K8SX/kubeconfig"
            return
        fi
        alive apiserver || die "kube-apiserver exited; see $RUN/apiserver.log"
        sleep 1
    done
    die "kube-apiserver not ready after 120 s; see $RUN/apiserver.log"
}

cmd_stop() {
    local name pid i
    for name in apiserver etcd; do
        [ -f "$RUN/$name.pid" ] || continue
        pid=$(cat "$RUN/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        fi
        rm -f "$RUN/$name.pid"
    done
    say "stopped"
}

cmd_clean() {
    # what only the build needs (~1.5 GB: Go's cache, the source tree); the binary, PKI and etcd data stay
    rm -rf "$K8SX/gocache" "$K8SX/gopath" "$K8SX/src" "$K8SX/openapi-gen"
    say "removed the build cache; kept $APISERVER"
}

cmd_status() {
    local name
    for name in etcd apiserver; do
        if alive "$name"; then say "$name running (pid $(cat "$RUN/$name.pid"))"; else say "$name not running"; fi
    done
    if api_ready; then say "API server ready; KUBECONFIG=$K8SX/kubeconfig"; return 0; fi
    say "API server not reachable"
    return 1
}

case "${1:-}" in
    build) cmd_build ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    clean) cmd_clean ;;
    env) echo "export KUBECONFIG=$K8SX/kubeconfig" ;;
    *) die "usage: $0 build|start|stop|status|env|clean" ;;
esac
