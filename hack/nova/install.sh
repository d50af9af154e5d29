#!/usr/bin/env bash
# Installs what the real Nova stack needs, idempotently:
#   - .tools/nova-venv: PyPI nova 34 + openstack-placement 16 + gunicorn + PyMySQL, in their own
#     venv (their pins must never leak into the operator's venv);
#   - MariaDB and RabbitMQ on 127.0.0.1: used as they are when they answer; otherwise Debian's
#     mariadb-server / rabbitmq-server are installed and started WITHOUT systemd (containers, CI).
# A second run only re-checks (a stamp newer than this script means the venv is complete).
# Usage: bash hack/nova/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=$root/.tools/nova-venv
stamp=$venv/.installed

# Pins: the versions this tier was built and measured with (Nova 2026.1 series); gunicorn 27
# for --no-control-socket (otherwise every server shares ~/.gunicorn/gunicorn.ctl).
NOVA_SPEC='nova>=34,<35'
PLACEMENT_SPEC='openstack-placement>=16,<17'
GUNICORN_SPEC='gunicorn>=27,<28'
PYMYSQL_SPEC='PyMySQL>=1.1,<2'

log() { printf 'hack/nova/install: %s\n' "$*" >&2; }

install_venv() {
    if [[ -f $stamp && $stamp -nt $here/install.sh ]]; then
        return
    fi
    mkdir -p "$root/.tools"
    exec 9>"$root/.tools/nova-venv.lock"
    flock 9  # two sessions installing at once: the second waits, then finds the stamp
    if [[ -f $stamp && $stamp -nt $here/install.sh ]]; then
        return
    fi
    log "installing nova + placement into $venv (first time: about a minute or two)"
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "$NOVA_SPEC" "$PLACEMENT_SPEC" "$GUNICORN_SPEC" "$PYMYSQL_SPEC"
    "$venv/bin/python" -c 'import nova, placement, gunicorn, pymysql'
    touch "$stamp"
}

apt_install() {
    log "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
            log "timed out waiting for $what"
            return 1
        fi
        sleep 1
    done
}

# The stack connects over TCP as root without a password (mysql+pymysql://root@127.0.0.1).
mariadb_up() { mysql -uroot -h127.0.0.1 -e 'SELECT 1'; }
mariadb_running() { mysqladmin --silent ping; }

ensure_mariadb() {
    mariadb_up >/dev/null 2>&1 && return
    command -v mysqld >/dev/null || apt_install mariadb-server mariadb-client
    if ! mariadb_running >/dev/null 2>&1; then
        log "starting MariaDB on 127.0.0.1:3306 (no systemd)"
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql >/dev/null
        (setsid mysqld_safe --bind-address=127.0.0.1 </dev/null >/dev/null 2>&1 &)
        wait_for 60 MariaDB mariadb_running
    fi
    if ! mariadb_up >/dev/null 2>&1; then
        # Debian's root@localhost authenticates by unix socket only: allow TCP without password.
        log "letting root log in over TCP without a password (test database server)"
        mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; FLUSH PRIVILEGES;"
        wait_for 10 "MariaDB over TCP" mariadb_up
    fi
}

rabbit_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && rabbitmqctl -q status; }

ensure_rabbitmq() {
    rabbit_up >/dev/null 2>&1 && return
    command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
    if ! rabbit_up >/dev/null 2>&1; then
        log "starting RabbitMQ on 127.0.0.1:5672 (no systemd)"
        (RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 setsid rabbitmq-server >/dev/null 2>&1 &)
        wait_for 90 RabbitMQ rabbit_up
    fi
}

install_venv
ensure_mariadb
ensure_rabbitmq
log "ready: $venv"
