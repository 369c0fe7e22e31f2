#!/bin/bash
# Entrypoint of every container of the test cluster: ROLE is mariadb, controller or node.
# Daemons run in the background with their logs in /var/log/slurm, so that a test may stop and
# restart one of them without stopping the container; `cluster logs HOST` prints those logs.
set -euo pipefail
role=${1:?usage: entrypoint.sh mariadb|controller|node|daemon-start|daemon-stop|agent-start|agent-stop}
log() { echo "entrypoint[$role]: $*"; }

wait_port() {  # host port seconds
    local deadline=$((SECONDS + $3))
    until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
        if ((SECONDS > deadline)); then log "gave up waiting for $1:$2 after $3 s"; return 1; fi
        sleep 1
    done
}

install_config() {
    install -d -o slurm -g slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    chmod 1777 /shared  # a shared file system for job output, writable by every user like /tmp
    install -m 644 /cluster-config/slurm.conf /cluster-config/gres.conf /cluster-config/topology.conf \
        /cluster-config/cgroup.conf /etc/slurm/
    install -m 600 -o slurm -g slurm /cluster-config/slurmdbd.conf /etc/slurm/
    # slurm-liquid's own Slurm files (lua plugins, slurm.conf snippet) come from the working tree's etc/.
    echo "# slurm-liquid snippet: replaced by etc/slurm/liquid.conf when the working tree has one" > /etc/slurm/liquid.conf
    if [ -d /etc/slurm-liquid/slurm ]; then
        cp -r /etc/slurm-liquid/slurm/. /etc/slurm/
    fi
    # The test cluster's own liquid.toml (enforcing, short timings) and site file.
    install -m 644 /cluster-config/liquid.toml /cluster-config/liquid-site.toml /etc/slurm/
    install -m 400 -o munge -g munge /cluster-state/munge.key /etc/munge/munge.key
    install -d -o munge -g munge /run/munge
    su -s /bin/sh munge -c /usr/sbin/munged
}

# The slurm-liquid daemon beside slurmctld (what etc/systemd/slurm-liquid-daemon.service does on a
# real controller); tests stop and start it with `docker exec CONTAINER entrypoint.sh daemon-stop`.
daemon_start() {  # extra arguments go to `slurm-liquid daemon` (e.g. --policy static)
    local started=1   # already running (e.g. still starting with the controller): wait for its first heartbeat
    if ! pgrep -f "slurm-liquid daemon" >/dev/null; then
        started=$(date +%s)
        setsid slurm-liquid daemon "$@" >>/var/log/slurm/liquid-daemon.out 2>&1 < /dev/null &
    fi
    local deadline=$((SECONDS + 20))
    until [ "$(cut -d' ' -f1 /var/spool/slurm-liquid/heartbeat 2>/dev/null || echo 0)" -ge "$started" ]; do
        if ((SECONDS > deadline)); then log "the slurm-liquid daemon wrote no heartbeat in 20 s"; return 1; fi
        sleep 0.2
    done
}

# The node agent (what etc/systemd/slurm-liquid-agent.service does on a real GPU node). The stand-in
# directory is where test jobs say what they pretend to use on the emulated GPUs.
agent_start() {  # extra arguments go to `slurm-liquid agent`
    if pgrep -f "slurm-liquid agent" >/dev/null; then return 0; fi
    install -d -m 1777 /tmp/liquid-standin
    install -d -m 755 /run/slurm-liquid-agent
    setsid slurm-liquid agent "$@" >>/var/log/slurm/liquid-agent.out 2>&1 < /dev/null &
    local deadline=$((SECONDS + 20))
    until [ -d /run/slurm-liquid-agent/ended ]; do
        if ((SECONDS > deadline)); then log "the slurm-liquid agent did not start in 20 s"; return 1; fi
        sleep 0.2
    done
}

case "$role" in
agent-start)
    shift
    agent_start "$@"
    ;;
agent-stop)
    pkill -TERM -f "slurm-liquid agent" || true
    ;;
daemon-start)
    shift
    daemon_start "$@"
    ;;
daemon-stop)
    pkill -KILL -f "slurm-liquid daemon" || true
    ;;
mariadb)
    if [ ! -d /var/lib/mysql/mysql ]; then mariadb-install-db --user=mysql >/dev/null; fi
    install -d -o mysql -g mysql /run/mysqld
    mariadbd --user=mysql --bind-address=0.0.0.0 --skip-name-resolve &
    wait_port 127.0.0.1 3306 60
    mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY 'slurm-liquid-test';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'%'; FLUSH PRIVILEGES;"
    log ready
    wait
    ;;
node)
    install_config
    # Emulated GPUs: character devices with NVIDIA's major number, enough for gres.conf File=.
    for i in 0 1 2 3; do [ -e /dev/nvidia$i ] || mknod /dev/nvidia$i c 195 $i; done
    slurmd
    agent_start || true
    log ready
    # Not `exec`: this shell stays the parent of the agent and reaps it when it dies.
    sleep infinity &
    wait
    ;;
controller)
    install_config
    wait_port mariadb 3306 120
    slurmdbd
    wait_port 127.0.0.1 6819 60
    slurmctld
    # Users need an association for their jobs to carry their name in accounting.
    deadline=$((SECONDS + 60))
    until sacctmgr -n -P show user alice 2>/dev/null | grep -q alice; do
        sacctmgr -i add account research Description=users Organization=liquid >/dev/null 2>&1 || true
        sacctmgr -i add user alice,bob Account=research >/dev/null 2>&1 || true
        if ((SECONDS > deadline)); then log "could not add the users to accounting"; break; fi
        sleep 1
    done
    daemon_start || true
    log ready
    # Not `exec`: this shell stays the parent of the daemon started above and reaps it when it dies.
    sleep infinity &
    wait
    ;;
*)
    log "unknown role"; exit 2 ;;
esac
