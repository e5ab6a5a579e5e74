#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft: broker and controller in one JVM, no ZooKeeper) from Maven
# Central's artifacts (deploy/maven/kafka-broker.pom.xml), on 127.0.0.1 only, for the tests and the recipes.
#
#   bash deploy/kafka/start.sh DIR [PORT]      # prints 127.0.0.1:PORT once the broker answers
#   bash deploy/kafka/stop.sh DIR              # stops it by the pid in DIR/kafka.pid
#
# DIR holds its configuration, data (DIR/data), log (DIR/kafka.log) and pid file (DIR/kafka.pid); a DIR
# that was formatted before keeps its topics. PORT defaults to 9092; the controller listens on a free port
# of its own. The jars are cached by deploy/maven/fetch.sh (fetched once a machine). Needs Java 17 and, the
# first time, Maven; exits 1 with one line on stderr when the broker cannot start.
# Environment: KAFKA_HEAP_OPTS (default -Xms128m -Xmx1g), KAFKA_START_TIMEOUT (seconds, default 90),
# KAFKA_SASL_PLAIN=USER:PASSWORD: clients on PORT must log in with SASL PLAIN as that user (SASL_PLAINTEXT; the
# broker talks to itself on a PLAINTEXT listener of another free port, which clients on PORT are not told of).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: start.sh DIR [PORT]}"
port="${2:-9092}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
fail() { echo "kafka start.sh: $*" >&2; exit 1; }

command -v java >/dev/null || fail "needs Java 17 ('java' on PATH)"
if [ -s "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
    fail "a broker already runs from $dir (pid $(cat "$dir/kafka.pid")); stop it with deploy/kafka/stop.sh $dir"
fi
jars="$(bash "$here/../maven/fetch.sh" kafka-broker)" || exit 1
classpath="$jars/*"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
listening() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
listening "$port" && fail "port $port on 127.0.0.1 is taken"
controller_port="$(free_port)"

if [ -n "${KAFKA_SASL_PLAIN:-}" ]; then
    user="${KAFKA_SASL_PLAIN%%:*}"
    password="${KAFKA_SASL_PLAIN#*:}"
    internal_port="$(free_port)"
    listeners="listeners=SASL_PLAINTEXT://127.0.0.1:$port,INTERNAL://127.0.0.1:$internal_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port,INTERNAL://127.0.0.1:$internal_port
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$user=\"$password\";"
else
    listeners="listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
fi
cat >"$dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
$listeners
controller.listener.names=CONTROLLER
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPERTIES
cat >"$dir/log4j2.properties" <<PROPERTIES
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/kafka.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
PROPERTIES

read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xms128m -Xmx1g}"
java_opts=("${heap[@]}" -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$classpath")
if [ ! -f "$dir/data/meta.properties" ]; then
    # A data folder is formatted once with a cluster id of its own.
    cluster_id="$(java -cp "$classpath" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    java "${java_opts[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
        >"$dir/format.log" 2>&1 || fail "could not format $dir/data: $(tail -1 "$dir/format.log")"
fi

# A session of its own (setsid), so that the caller's Ctrl-C or process group does not reach it; stop.sh ends it.
setsid java "${java_opts[@]}" kafka.Kafka "$dir/server.properties" >"$dir/kafka.out" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/kafka.pid"
for _ in $(seq 1 "${KAFKA_START_TIMEOUT:-90}"); do
    if ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$dir/kafka.pid"
        fail "the broker exited while starting: $(grep -h -m1 -E 'ERROR|Exception' "$dir/kafka.log" "$dir/kafka.out" 2>/dev/null | cut -c1-300) (log: $dir/kafka.log)"
    fi
    if listening "$port"; then
        echo "127.0.0.1:$port"
        exit 0
    fi
    sleep 1
done
bash "$here/stop.sh" "$dir" >/dev/null 2>&1 || true
fail "the broker did not listen on 127.0.0.1:$port within ${KAFKA_START_TIMEOUT:-90} s (log: $dir/kafka.log)"
