package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import static io.dspark.vllm.request.RequesterTests.check;
import static io.dspark.vllm.request.RequesterTests.equal;
import static io.dspark.vllm.request.RequesterTests.eventually;
import static io.dspark.vllm.request.Servers.OK_BODY;
import static io.dspark.vllm.request.Servers.Raw;
import static io.dspark.vllm.request.Servers.Script;
import static io.dspark.vllm.request.Servers.Web;
import static io.dspark.vllm.request.Servers.of;
import static io.dspark.vllm.request.Servers.respond;
import static io.dspark.vllm.request.Servers.spec;

/**
 * Several replicas behind one endpoint, against real servers on 127.0.0.1 (and 127.0.0.2: a host name's second
 * address): least-loaded and prefix routing, a replica that dies mid-run, ejection and readmission, a name looked
 * up again. Each test has 60 s; they run in name order.
 */
@TestMethodOrder(MethodOrderer.MethodName.class)
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
public final class ReplicasTest {

    /** A spec over these base URLs (one replica each). */
    static ObjectNode specOf(String... bases) {
        ObjectNode n = spec(bases[0]);
        ArrayNode urls = n.putArray("urls");
        ArrayNode health = n.putArray("health_urls");
        for (String b : bases) {
            urls.add(b + "/v1/completions");
            health.add(b + "/health");
        }
        return n;
    }

    static Web slowOk(long ms) throws Exception {
        return new Web((x, s) -> {
            Thread.sleep(ms);
            respond(x, 200, OK_BODY);
        });
    }

    /** Requests "p0".."p{n-1}" (ids "id-0"...), {@code everyMs} apart (0: at once). */
    static List<CompletableFuture<Outcome>> sendEach(Requester r, int n, long everyMs) throws InterruptedException {
        List<CompletableFuture<Outcome>> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            sent.add(r.send("p" + i, "id-" + i));
            if (everyMs > 0) {
                Thread.sleep(everyMs);
            }
        }
        return sent;
    }

    static List<Outcome> all(List<CompletableFuture<Outcome>> futures) throws Exception {
        List<Outcome> out = new ArrayList<>();
        for (CompletableFuture<Outcome> f : futures) {
            out.add(f.get(60, TimeUnit.SECONDS));
        }
        return out;
    }

    static Map<String, Integer> byReplica(List<Outcome> outcomes) {
        Map<String, Integer> n = new HashMap<>();
        for (Outcome o : outcomes) {
            n.merge(String.valueOf(o.replica), 1, Integer::sum);
        }
        return n;
    }

    /** Answers after {@code ms}, counting in {@code open} the requests it holds and has not begun to answer. */
    static Web counting(long ms, AtomicInteger open, AtomicInteger most) throws Exception {
        return new Web((x, s) -> {
            most.accumulateAndGet(open.incrementAndGet(), Math::max);
            Thread.sleep(ms);
            open.decrementAndGet(); // before the answer: the client cannot have freed this slot yet
            respond(x, 200, OK_BODY);
        });
    }

    @Test
    void test01LeastLoadedSpreadsTheRequests() throws Exception {
        AtomicInteger[] open = {new AtomicInteger(), new AtomicInteger(), new AtomicInteger()};
        AtomicInteger[] most = {new AtomicInteger(), new AtomicInteger(), new AtomicInteger()};
        try (Web a = counting(20, open[0], most[0]); Web b = counting(20, open[1], most[1]);
                Web c = counting(20, open[2], most[2]);
                Requester r = new Requester(of(specOf(a.base, b.base, c.base)))) {
            List<CompletableFuture<Outcome>> sent = new ArrayList<>();
            for (int i = 0; i < 300; i++) {
                sent.add(r.send("p" + i, "id-" + i));
            }
            List<Outcome> outcomes = all(sent);
            for (Outcome o : outcomes) {
                check(o.ok(), "ok: " + o.error);
            }
            List<Web> webs = List.of(a, b, c);
            for (int i = 0; i < 3; i++) {
                long n = webs.get(i).count("POST", "/v1/completions");
                check(n >= 60, "each replica takes its share: " + n + " of 300 " + byReplica(outcomes));
                check(most[i].get() <= 8, "at most its own limit at once: " + most[i].get());
            }
            equal(3, r.replicas().size(), "replicas");
            equal(24, r.concurrencyLimit(), "three limits of 8");
            Set<String> names = new HashSet<>();
            for (Replicas.Replica x : r.replicas()) {
                names.add(x.name());
                check(x.answers() >= 60, "answers of " + x.name() + ": " + x.answers());
            }
            check(names.containsAll(byReplica(outcomes).keySet()), "each outcome names its replica: "
                    + byReplica(outcomes).keySet() + " in " + names);
        }
    }

    @Test
    void test02PrefixRoutingSendsAHeadToOneReplica() throws Exception {
        try (Web a = slowOk(0); Web b = slowOk(0); Web c = slowOk(0)) {
            ObjectNode n = specOf(a.base, b.base, c.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            try (Requester r = new Requester(of(n))) {
                Map<String, Set<String>> replicasOfHead = new HashMap<>();
                for (int round = 0; round < 4; round++) {
                    for (int head = 0; head < 25; head++) {
                        String h = String.format("system %04d", head);
                        Outcome o = r.send(h + " | question " + round, "id-" + head + "-" + round)
                                .get(20, TimeUnit.SECONDS);
                        check(o.ok(), "ok: " + o.error);
                        if (round > 0) { // (while new heads come, the share of each replica moves a few)
                            replicasOfHead.computeIfAbsent(h, k -> new HashSet<>()).add(o.replica);
                        }
                    }
                }
                Set<String> used = new HashSet<>();
                for (Map.Entry<String, Set<String>> e : replicasOfHead.entrySet()) {
                    equal(1, e.getValue().size(), "the replicas of the head '" + e.getKey() + "'");
                    used.addAll(e.getValue());
                }
                equal(3, used.size(), "the heads spread over the replicas");
            }
        }
    }

    @Test
    void test03AReplicaThatDiesMidRunCostsNoRequest() throws Exception {
        try (Web a = slowOk(5); Web b = slowOk(5); Web c = slowOk(5)) {
            ObjectNode n = specOf(a.base, b.base, c.base);
            n.put("max_attempts", 10);
            int deadPort = b.port();
            try (Requester r = new Requester(of(n))) {
                AtomicInteger answered = new AtomicInteger();
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 900; i++) {
                    if (i == 300) {
                        eventually(() -> answered.get() >= 250, "250 answers before the kill");
                        b.close(); // its listening socket and its connections close: in-flight attempts break
                    }
                    CompletableFuture<Outcome> f = r.send("p" + i, "id-" + i);
                    f.thenAccept(o -> answered.incrementAndGet());
                    sent.add(f);
                }
                List<Outcome> outcomes = all(sent);
                for (Outcome o : outcomes) {
                    check(o.ok(), "every request answered: " + o.error);
                }
                Replicas.Replica dead = null;
                for (Replicas.Replica x : r.replicas()) {
                    if (x.name().endsWith(":" + deadPort)) {
                        dead = x;
                    }
                }
                check(dead != null && dead.ejected(), "the dead replica is ejected");
                check(a.count("POST", "/v1/completions") + c.count("POST", "/v1/completions") >= 600,
                        "the others took the rest");
                // what the death cost: the attempts it broke (at most its limit, 8), and those that found it
                // closed before it was ejected (a connect failure ejects it at once) - not a share of the rest
                long extra = r.attempts() - 900;
                check(extra <= 40, "attempts beyond one per request: " + extra);
            }
        }
    }

    @Test
    void test04NoReplicaLeftWithinTheDeadlineIsAnError() throws Exception {
        int p1 = Servers.freePort();
        int p2 = Servers.freePort();
        ObjectNode n = specOf("http://127.0.0.1:" + p1, "http://127.0.0.1:" + p2);
        // A deadline that leaves the request the time to meet both replicas' refusals (a first connection's
        // start-up in a fresh requester): within 1 s a loaded machine let it meet one, and the other stayed in.
        n.put("deadline_s", 5.0);
        n.put("hold_while_down", true);
        try (Requester r = new Requester(of(n))) {
            Outcome o = r.send("p", "id-1").get(20, TimeUnit.SECONDS);
            check(!o.ok(), "an error");
            equal(PlanContract.CONNECT, o.errorKind, "kind");
            equal(null, o.replica, "no replica answered");
            eventually(r::serverDown, "both ejected: the requests are held");
        }
    }

    @Test
    void test05AnEjectedReplicaIsTakenBackWhenItAnswers() throws Exception {
        try (Web b = slowOk(0)) {
            Web a = slowOk(0);
            int port = a.port();
            try (Requester r = new Requester(of(specOf(a.base, b.base)))) {
                a.close();
                for (int i = 0; i < 20; i++) {
                    Outcome o = r.send("p" + i, "id-" + i).get(20, TimeUnit.SECONDS);
                    check(o.ok(), "ok: " + o.error);
                }
                Replicas.Replica first = r.replicas().get(0);
                check(first.ejected(), "the closed replica is ejected");
                long before = b.count("POST", "/v1/completions");
                equal(20L, before, "the other took all");
                try (Web again = new Web((x, s) -> respond(x, 200, OK_BODY), port, null, false)) {
                    eventually(() -> !first.ejected(), "taken back after a /health probe");
                    check(again.count("GET", "/health") >= 1, "probed");
                    List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                    for (int i = 0; i < 40; i++) {
                        sent.add(r.send("q" + i, "id-q" + i));
                    }
                    all(sent);
                    check(again.count("POST", "/v1/completions") > 0, "it takes requests again");
                }
            }
        }
    }

    @Test
    void test06ANameWithSeveralAddressesIsSeveralReplicas() throws Exception {
        InetAddress one = InetAddress.getByName("127.0.0.1");
        InetAddress two = InetAddress.getByName("127.0.0.2");
        try (Web a = new Web((x, s) -> respond(x, 200, OK_BODY), one, 0, null, false);
                Web b = new Web((x, s) -> respond(x, 200, OK_BODY), two, a.port(), null, false)) {
            AtomicReference<InetAddress[]> dns = new AtomicReference<>(new InetAddress[] {two, one});
            String base = "http://replicas.test:" + a.port();
            ObjectNode n = spec(base);
            n.putObject("routing").put("resolve_interval_s", 0.1);
            Replicas.Resolver resolver = host -> {
                if (!host.equals("replicas.test")) {
                    throw new java.net.UnknownHostException(host);
                }
                return dns.get();
            };
            try (Requester r = new Requester(of(n), resolver)) {
                equal(2, r.replicas().size(), "two addresses: two replicas");
                List<CompletableFuture<Outcome>> sent = sendEach(r, 60, 0);
                for (Outcome o : all(sent)) {
                    check(o.ok(), "ok: " + o.error);
                }
                check(a.count("POST", "/v1/completions") > 0 && b.count("POST", "/v1/completions") > 0,
                        "both addresses answered");
                equal("replicas.test:" + a.port(), a.posts().get(0).header("host"), "the host header names the name");
                dns.set(new InetAddress[] {two});
                eventually(() -> r.replicas().size() == 1, "looked up again: one replica left");
                long before = a.count("POST", "/v1/completions");
                sent.clear();
                for (int i = 0; i < 30; i++) {
                    sent.add(r.send("q" + i, "id-q" + i));
                }
                for (Outcome o : all(sent)) {
                    check(o.ok(), "ok: " + o.error);
                }
                equal(before, a.count("POST", "/v1/completions"), "nothing more to the address gone");
                dns.set(new InetAddress[] {one, two});
                eventually(() -> r.replicas().size() == 2, "it comes back");
            }
        }
    }

    @Test
    void test07PrefixRoutingKeepsItsHeadsUnderLoad() throws Exception {
        // Every replica full, requests waiting: a head still goes to its replica (it waits for it), rather than to
        // whichever replica frees a slot first - which would make prefix routing least-loaded under load.
        try (Web a = slowOk(5); Web b = slowOk(5); Web c = slowOk(5)) {
            ObjectNode n = specOf(a.base, b.base, c.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            n.with("concurrency").put("initial", 4).put("max", 4);
            try (Requester r = new Requester(of(n))) {
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                List<String> heads = new ArrayList<>();
                for (int i = 0; i < 360; i++) {
                    String h = String.format("system %04d", i % 12);
                    heads.add(h);
                    sent.add(r.send(h + " | question " + i, "id-" + i));
                }
                List<Outcome> outcomes = all(sent);
                Map<String, Map<String, Integer>> byHead = new HashMap<>();
                for (int i = 0; i < outcomes.size(); i++) {
                    check(outcomes.get(i).ok(), "ok: " + outcomes.get(i).error);
                    byHead.computeIfAbsent(heads.get(i), k -> new HashMap<>())
                            .merge(outcomes.get(i).replica, 1, Integer::sum);
                }
                int onItsReplica = 0;
                for (Map<String, Integer> counts : byHead.values()) {
                    onItsReplica += counts.values().stream().max(Integer::compare).orElse(0);
                }
                check(onItsReplica >= 0.75 * 360, "requests on their head's replica: " + onItsReplica + " of 360 "
                        + byHead);
            }
        }
    }

    @Test
    void test08ARoutingKeySendsItsRequestsToOneReplica() throws Exception {
        // A model's 'request.routing.key-column' (a user id): the rows of one user go to one replica, whatever
        // their bodies (each a different question), where their conversation's prefix is cached. A request with no
        // key goes by its body's head, as without the option.
        try (Web a = slowOk(0); Web b = slowOk(0); Web c = slowOk(0)) {
            ObjectNode n = specOf(a.base, b.base, c.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            try (Requester r = new Requester(of(n))) {
                Map<String, Set<String>> replicasOfUser = new HashMap<>();
                Set<String> replicasOfHead = new HashSet<>();
                for (int round = 0; round < 6; round++) {
                    for (int user = 0; user < 24; user++) {
                        String id = "user-" + user;
                        byte[] body = String.format("question %04d of %s", round * 24 + user, id)
                                .getBytes(java.nio.charset.StandardCharsets.UTF_8);
                        Outcome o = r.sendBody(body, id + "-" + round,
                                id.getBytes(java.nio.charset.StandardCharsets.UTF_8)).get(20, TimeUnit.SECONDS);
                        check(o.ok(), "ok: " + o.error);
                        if (round > 0) { // (while new users come, the share of each replica moves a few)
                            replicasOfUser.computeIfAbsent(id, k -> new HashSet<>()).add(o.replica);
                        }
                    }
                    Outcome o = r.sendBody(r.bodyOf("system 0001 | question " + round), "head-" + round, null)
                            .get(20, TimeUnit.SECONDS);
                    check(o.ok(), "ok: " + o.error);
                    replicasOfHead.add(o.replica);
                }
                Set<String> used = new HashSet<>();
                for (Map.Entry<String, Set<String>> e : replicasOfUser.entrySet()) {
                    equal(1, e.getValue().size(), "the replicas of " + e.getKey() + " " + replicasOfUser);
                    used.addAll(e.getValue());
                }
                equal(3, used.size(), "the users spread over the replicas");
                equal(1, replicasOfHead.size(), "the replicas of a head with no key");
            }
        }
    }

    @Test
    void test09A429GoesAtOnceToAReplicaWithRoom() throws Exception {
        // One replica is full (429, Retry-After: 30 s, past every request's deadline of 20 s), the other has room:
        // a request the full one refused goes to the other at once; its Retry-After holds the full replica only.
        try (Web full = new Web((x, s) -> respond(x, 429, "{\"error\":{\"message\":\"too many\"}}",
                "Retry-After", "30")); Web free = slowOk(20)) {
            try (Requester r = new Requester(of(specOf(full.base, free.base)))) {
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    sent.add(r.send("p" + i, "id-" + i));
                }
                List<Outcome> outcomes = all(sent);
                check(full.count("POST", "/v1/completions") > 0, "the full replica was tried");
                for (Outcome o : outcomes) {
                    check(o.ok(), "answered by the replica with room: " + o.error);
                    equal(free.base.substring("http://".length()), o.replica, "the replica that answered");
                }
            }
        }
    }

    @Test
    void test10SubtasksStartAtTheirShareOfTheStart() throws Exception {
        // Two parallel instances, each its own requester with 'auto' concurrency (start 16), share a replica that
        // takes 18 at once and answers 429 beyond: each starts at 8 (its share of the start of 16), not 16 (32
        // together: 14 requests refused at once, each waiting its Retry-After). 18, not 16: after its first window
        // in which requests waited, each limit may take its one AIMD step up (8 -> 9); the 16 requests each sends
        // leave no second window with a queue, so no further step. The server frees its slot before it answers,
        // so a client that sends its next request on the answer never finds the old one still counted.
        AtomicInteger busy = new AtomicInteger();
        AtomicInteger peak = new AtomicInteger();
        AtomicInteger refused = new AtomicInteger();
        try (Web web = new Web((x, s) -> {
            int now = busy.incrementAndGet();
            if (now > 18) {
                busy.decrementAndGet();
                refused.incrementAndGet();
                respond(x, 429, "{\"error\":{\"message\":\"too many\"}}", "Retry-After", "1");
                return;
            }
            peak.accumulateAndGet(now, Math::max);
            Thread.sleep(200);
            busy.decrementAndGet();
            respond(x, 200, OK_BODY);
        })) {
            ObjectNode n = spec(web.base);
            ((ObjectNode) n.get("concurrency")).put("adaptive", true).put("initial", 16).put("min", 1)
                    .put("max", 256);
            try (Requester a = new Requester(of(n), 2); Requester b = new Requester(of(n), 2);
                    Requester alone = new Requester(of(n))) {
                equal(8, a.concurrencyLimit(), "one of two starts at half the start");
                equal(16, alone.concurrencyLimit(), "one alone starts at the start");
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 16; i++) {
                    sent.add(a.send("a" + i, "a-" + i));
                    sent.add(b.send("b" + i, "b-" + i));
                }
                for (Outcome o : all(sent)) {
                    check(o.ok(), "ok: " + o.error);
                }
                equal(0, refused.get(), "requests answered 429");
                check(peak.get() <= 18, "at most 18 at once: " + peak.get());
            }
        }
    }

    /** {@code n} user ids that rendezvous hashing alone would all give to {@code replica} (a name: host:port). */
    static List<String> usersHashedTo(String replica, List<String> names, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; out.size() < n; i++) {
            String id = "user-" + i;
            long key = Replicas.fnv(id.getBytes(java.nio.charset.StandardCharsets.UTF_8), Integer.MAX_VALUE);
            String best = null;
            long top = 0;
            for (String name : names) {
                long w = Replicas.mix(key ^ Replicas.fnv(name.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                        Integer.MAX_VALUE));
                if (best == null || Long.compareUnsigned(w, top) > 0) {
                    best = name;
                    top = w;
                }
            }
            if (best.equals(replica)) {
                out.add(id);
            }
        }
        return out;
    }

    @Test
    void test11FewKeysSplitEvenlyAndSubtasksAgree() throws Exception {
        // 8 heads (here: users) over 2 replicas whose caches each hold about 4: the hash alone may give one
        // replica 5 or more (these 8 it gives all to the first), overfilling its cache. Each replica takes half of
        // the distinct keys seen recently; two requesters (two subtasks) that saw the same keys, in another order,
        // give each key the same replica.
        try (Web a = slowOk(0); Web b = slowOk(0)) {
            ObjectNode n = specOf(a.base, b.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            List<String> names = List.of("127.0.0.1:" + a.port(), "127.0.0.1:" + b.port());
            List<String> users = usersHashedTo(names.get(0), names, 8);
            try (Requester one = new Requester(of(n)); Requester two = new Requester(of(n))) {
                List<Map<String, Set<String>>> seen = List.of(new HashMap<>(), new HashMap<>());
                for (int round = 0; round < 4; round++) {
                    for (int i = 0; i < users.size(); i++) {
                        for (int s = 0; s < 2; s++) {
                            String id = users.get(s == 0 ? i : users.size() - 1 - i); // the second in reverse
                            byte[] body = ("question " + round + " of " + id).getBytes(
                                    java.nio.charset.StandardCharsets.UTF_8);
                            Outcome o = (s == 0 ? one : two).sendBody(body, id + "-" + round + "-" + s,
                                    id.getBytes(java.nio.charset.StandardCharsets.UTF_8)).get(20, TimeUnit.SECONDS);
                            check(o.ok(), "ok: " + o.error);
                            if (round > 0) { // once each has seen every key
                                seen.get(s).computeIfAbsent(id, k -> new HashSet<>()).add(o.replica);
                            }
                        }
                    }
                }
                Map<String, Integer> keysOf = new HashMap<>();
                for (String id : users) {
                    equal(1, seen.get(0).get(id).size(), "the replicas of " + id + " " + seen.get(0));
                    equal(seen.get(0).get(id), seen.get(1).get(id), "the two requesters' replica of " + id);
                    keysOf.merge(seen.get(0).get(id).iterator().next(), 1, Integer::sum);
                }
                equal(Map.of(names.get(0), 4, names.get(1), 4), keysOf, "the keys of each replica");
            }
        }
    }

    @Test
    void test12AReplicaWithAFreeSlotKeepsItsHead() throws Exception {
        // One head, 6 requests at once, each replica with 8 slots: its replica takes all 6 at once. A load bound
        // against the mean of in-flight counts this small sent the third and later to the other replica, whose
        // cache then held the head too, though its own replica had room.
        try (Web a = slowOk(300); Web b = slowOk(300)) {
            ObjectNode n = specOf(a.base, b.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            try (Requester r = new Requester(of(n))) {
                for (int round = 0; round < 3; round++) {
                    List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                    for (int i = 0; i < 6; i++) {
                        sent.add(r.send("system 0001 | question " + round + "-" + i, "id-" + round + "-" + i));
                    }
                    Map<String, Integer> counts = byReplica(all(sent));
                    equal(1, counts.size(), "the replicas of one head's requests, round " + round + ": " + counts);
                }
            }
        }
    }

    @Test
    void test13ASustainedOverloadStillMovesRequests() throws Exception {
        // One head whose replica is slow and full for long: the load bound still gives the other replica a share
        // (the job is not held to the slow replica's pace), once the overload has lasted.
        try (Web a = slowOk(100); Web b = slowOk(100)) {
            ObjectNode n = specOf(a.base, b.base);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            n.with("concurrency").put("initial", 2).put("max", 2);
            try (Requester r = new Requester(of(n))) {
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 120; i++) { // alone, its replica would take 6 s
                    sent.add(r.send("system 0001 | question " + i, "id-" + i));
                }
                Map<String, Integer> counts = byReplica(all(sent));
                equal(2, counts.size(), "both replicas answered: " + counts);
                for (int c : counts.values()) {
                    check(c >= 20, "each replica's share: " + counts);
                }
            }
        }
    }

    @Test
    void test14AReplicaThatAnswers500GoesToAnother() throws Exception {
        // A replica whose completions fail with 500 while its /health answers 200 (a vLLM whose engine died): a
        // 500 is the request's own fault with one server, but with another replica in, the request goes there.
        // One that every replica answers 500 ends after one attempt on each, not in a loop until the deadline.
        try (Web bad = new Web((x, s) -> respond(x, 500, "{\"error\": \"engine dead\"}"));
                Web good = slowOk(0)) {
            try (Requester r = new Requester(of(specOf(bad.base, good.base)))) {
                List<CompletableFuture<Outcome>> sent = sendEach(r, 60, 0);
                for (Outcome o : all(sent)) {
                    check(o.ok(), "every request answered: " + o.error);
                    check(o.replica != null && o.replica.endsWith(":" + good.port()), "by the good one: " + o.replica);
                }
                check(bad.count("POST", "/v1/completions") >= 1, "the 500s were met");
            }
        }
        try (Web a = new Web((x, s) -> respond(x, 500, "{}")); Web b = new Web((x, s) -> respond(x, 500, "{}"))) {
            try (Requester r = new Requester(of(specOf(a.base, b.base)))) {
                Outcome o = r.send("p", "id-1").get(20, TimeUnit.SECONDS);
                check(!o.ok() && o.status != null && o.status == 500, "a 500 from both: " + o.error);
                equal(2, o.attempts, "one attempt on each replica");
            }
        }
    }

    @Test
    void test15TwoBaseUrlsOnOneHostAndPortAreTwoNames() throws Exception {
        // A gateway that serves each vLLM under its own path: the replicas' names (their metrics group, the
        // 'request.replica' of a row) tell them apart by that path.
        try (Web gw = slowOk(0)) {
            for (String p : List.of("/a", "/b")) {
                gw.handlers.put(p + "/v1/completions", (x, s) -> respond(x, 200, OK_BODY));
                gw.handlers.put(p + "/health", (x, s) -> respond(x, 200, ""));
            }
            try (Requester r = new Requester(of(specOf(gw.base + "/a", gw.base + "/b")))) {
                Set<String> names = new HashSet<>();
                for (Replicas.Replica x : r.replicas()) {
                    names.add(x.name());
                }
                String hostPort = gw.base.substring("http://".length());
                equal(Set.of(hostPort + "/a", hostPort + "/b"), names, "the replicas' names");
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 40; i++) {
                    sent.add(r.send("p" + i, "id-" + i));
                }
                for (Outcome o : all(sent)) {
                    check(o.ok() && names.contains(o.replica), "answered, naming its replica: " + o.replica);
                }
            }
        }
        try (Web one = slowOk(0); Requester r = new Requester(of(specOf(one.base + "/x")))) {
            equal(one.base.substring("http://".length()), r.replicas().get(0).name(), "one base URL: host:port, whatever its path");
        }
    }

    @Test
    void test16AReplicaThatSpeaksNoHttpOrFailsTlsGoesToAnother() throws Exception {
        // One replica's port holds another service (no HTTP answer), another's URL says https where the service
        // speaks no TLS (the handshake fails): "the same server answers the same way", but another replica answers.
        Script ssh = (s, in, out) -> out.write(
                "SSH-2.0-OpenSSH_9.6\r\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        try (Raw other = new Raw(ssh); Raw noTls = new Raw(ssh, false); Web good = slowOk(0)) {
            String tls = noTls.base.replace("http://", "https://");
            try (Requester r = new Requester(of(specOf(other.base, tls, good.base)))) {
                List<CompletableFuture<Outcome>> sent = sendEach(r, 60, 0);
                for (Outcome o : all(sent)) {
                    check(o.ok(), "every request answered: " + o.error);
                }
                check(other.connections.get() >= 1 && noTls.connections.get() >= 1, "both services were met");
                for (Replicas.Replica x : r.replicas()) {
                    check(x.name().endsWith(":" + good.port()) || x.ejected(), "ejected: " + x.name());
                }
            }
        }
    }

    @Test
    void test17OneAnswerThatIsNoHttpDoesNotEjectAHealthyReplica() throws Exception {
        // A replica whose first answer is no HTTP (a proxy's hiccup), then answers as it should: that request goes
        // to the other replica, and this one stays in (3 such answers in a row eject it, not one).
        AtomicInteger answered = new AtomicInteger();
        Script hiccup = (sock, in, out) -> {
            if (answered.getAndIncrement() == 0) {
                out.write("SSH-2.0-OpenSSH_9.6\r\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
                return;
            }
            byte[] body = OK_BODY.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            out.write(("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    + "content-length: " + body.length + "\r\n\r\n").getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            out.write(body);
        };
        try (Raw odd = new Raw(hiccup); Web good = slowOk(0)) {
            try (Requester r = new Requester(of(specOf(odd.base, good.base)))) {
                for (int i = 0; i < 40 && answered.get() == 0; i++) {
                    Outcome o = r.send("p" + i, "id-" + i).get(30, java.util.concurrent.TimeUnit.SECONDS);
                    check(o.ok(), "every request answered: " + o.error);
                }
                check(answered.get() >= 1, "the odd replica was met");
                for (Replicas.Replica x : r.replicas()) {
                    check(!x.ejected(), "not ejected after one odd answer: " + x.name());
                }
            }
        }
    }

    /** Takes a completion and never answers it (until closed); its /health answers 200. */
    static Web hung() throws Exception {
        return new Web((x, s) -> Thread.sleep(600_000));
    }

    static Replicas.Replica replicaOn(Requester r, Web web) {
        for (Replicas.Replica x : r.replicas()) {
            if (x.name().endsWith(":" + web.port())) {
                return x;
            }
        }
        throw new AssertionError("no replica on port " + web.port());
    }

    @Test
    void test18AReplicaThatHangsIsEjectedAfterThreeTimeouts() throws Exception {
        // A replica that takes requests and never answers them, while its /health answers 200 (an engine stuck in
        // a kernel, a wedged proxy): each request sent to it waited its whole timeout before going elsewhere, for
        // as long as the job ran. Three timeouts in a row eject it, as three 5xx do; each of those requests goes
        // to the other replica at once (no backoff: it is that replica's trouble) and is answered within its
        // deadline. (Backoff steps of 30 s: no probe takes it back during the test, nor does a backoff fit in the
        // deadline.)
        try (Web stuck = hung(); Web good = slowOk(0)) {
            ObjectNode n = specOf(stuck.base, good.base);
            n.put("timeout_s", 0.5);
            n.put("backoff_initial_s", 30.0).put("backoff_max_s", 30.0);
            n.with("concurrency").put("initial", 2).put("max", 2);
            try (Requester r = new Requester(of(n))) {
                int retried = 0;
                for (int i = 0; i < 30; i++) {
                    Outcome o = r.send("p" + i, "id-" + i).get(20, TimeUnit.SECONDS);
                    check(o.ok(), "every request answered: " + o.error);
                    equal(good.base.substring("http://".length()), o.replica, "the replica that answered");
                    retried += o.attempts > 1 ? 1 : 0;
                }
                equal(3L, stuck.count("POST", "/v1/completions"), "requests sent to the hung replica");
                equal(3, retried, "requests answered on a second attempt");
                equal(1L, r.gateClosures(), "ejections");
            }
        }
        // ML_PREDICT's deadline under 'request.timeout' (the attempt's timeout is then the deadline, less the
        // moments before the attempt): the rows sent to it end as timeouts, but only three.
        try (Web stuck = hung(); Web good = slowOk(0)) {
            ObjectNode n = specOf(stuck.base, good.base);
            n.put("timeout_s", 0.5);
            n.put("deadline_s", 0.5);
            n.put("backoff_initial_s", 30.0).put("backoff_max_s", 30.0);
            n.with("concurrency").put("initial", 2).put("max", 2);
            try (Requester r = new Requester(of(n))) {
                int errors = 0;
                for (int i = 0; i < 30; i++) {
                    Outcome o = r.send("p" + i, "id-" + i).get(20, TimeUnit.SECONDS);
                    if (!o.ok()) {
                        equal(PlanContract.TIMEOUT, o.errorKind, "kind");
                        errors++;
                    }
                }
                equal(3L, stuck.count("POST", "/v1/completions"), "requests sent to the hung replica");
                equal(3, errors, "requests no replica answered within their deadline");
            }
        }
    }

    @Test
    void test19AReplicaTakenBackByItsProbeIsOnProbation() throws Exception {
        // A hung replica's /health answers, so its probe takes it back soon after each ejection. Taken back, it is
        // on probation: one request at a time until one is answered, and one timeout (not three) ejects it again,
        // so it costs one request per probe (the probes ever further apart), not its whole limit each time. Once
        // it answers a completion, its probation ends: its whole limit again.
        AtomicBoolean healed = new AtomicBoolean();
        try (Web stuck = new Web((x, s) -> {
            if (healed.get()) {
                respond(x, 200, OK_BODY);
            } else {
                Thread.sleep(600_000);
            }
        }); Web good = slowOk(100)) {
            ObjectNode n = specOf(stuck.base, good.base);
            n.put("timeout_s", 0.5);
            n.with("concurrency").put("initial", 2).put("max", 2);
            try (Requester r = new Requester(of(n))) {
                for (int i = 0; i < 30 && r.gateClosures() == 0; i++) {
                    check(r.send("p" + i, "id-" + i).get(20, TimeUnit.SECONDS).ok(), "answered");
                }
                equal(1L, r.gateClosures(), "ejected");
                Replicas.Replica s = replicaOn(r, stuck);
                eventually(() -> !s.ejected(), "taken back by its probe");
                equal(1, s.limit(), "on probation: one request at a time");
                long posts = stuck.count("POST", "/v1/completions");
                long closures = r.gateClosures();
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    sent.add(r.send("q" + i, "id-q" + i));
                }
                for (Outcome o : all(sent)) {
                    check(o.ok(), "every request answered: " + o.error);
                }
                long postsOnProbation = stuck.count("POST", "/v1/completions") - posts;
                check(postsOnProbation >= 1, "the replica on probation took a request while the other was full");
                equal(postsOnProbation, r.gateClosures() - closures, "each timeout on probation ejects it again");

                healed.set(true);
                eventually(() -> !s.ejected(), "taken back by its probe");
                posts = stuck.count("POST", "/v1/completions");
                for (int round = 0; round < 20 && s.limit() < 2; round++) {
                    sent.clear();
                    for (int i = 0; i < 10; i++) {
                        sent.add(r.send("h" + round + "-" + i, "id-h" + round + "-" + i));
                    }
                    for (Outcome o : all(sent)) {
                        check(o.ok(), "every request answered: " + o.error);
                    }
                }
                check(stuck.count("POST", "/v1/completions") > posts, "the healed replica answered");
                equal(2, s.limit(), "its probation ended with its first answer");
                check(!s.ejected(), "in");
            }
        }
    }

    @Test
    void test20ASlowReplicaIsNotEjectedForTheTimeItsRequestsWaitedHere() throws Exception {
        // Two replicas that answer in 200 ms, one request at a time each ('auto' within 1..1), and twice as many
        // requests coming as they answer, each with a deadline that is also its attempt's timeout (ML_PREDICT's,
        // under 'request.timeout'): they wait here for a slot longer and longer, and one that gets it late times
        // out soon on a replica that answers all along, one after another. Such a timeout says nothing of the
        // replica: only one of an attempt that had (nearly) its whole timeout on the replica counts toward an
        // ejection. Neither replica is ejected.
        try (Web a = slowOk(200); Web b = slowOk(200)) {
            ObjectNode n = specOf(a.base, b.base);
            n.put("timeout_s", 2.0);
            n.put("deadline_s", 2.0);
            n.with("concurrency").put("adaptive", true).put("initial", 1).put("min", 1).put("max", 1);
            try (Requester r = new Requester(of(n))) {
                List<CompletableFuture<Outcome>> sent = sendEach(r, 60, 50);
                int ok = 0;
                int timedOut = 0;
                for (Outcome o : all(sent)) {
                    ok += o.ok() ? 1 : 0;
                    timedOut += PlanContract.TIMEOUT.equals(o.errorKind) && o.attempts > 0 ? 1 : 0;
                }
                check(ok >= 4, "answered: " + ok);
                check(timedOut >= 3, "attempts cut short by their deadline timed out: " + timedOut);
                equal(0L, r.gateClosures(), "ejections");
            }
        }
    }

    @Test
    void test21AnAttemptCutShortByItsDeadlineDoesNotLowerTheLimit() throws Exception {
        // As above, with one server and 'auto' within 1..2 starting at 2: requests that waited here for a slot get
        // what is left of their deadline, and time out soon. Such a timeout is the client's queue, not the server's
        // overload: lowering the limit for it (x0.75: 1) would only make the queue longer, and the next attempts
        // shorter. The server answers each in 200 ms all along: the limit stays at 2.
        try (Web a = slowOk(200)) {
            ObjectNode n = spec(a.base);
            n.put("timeout_s", 2.0);
            n.put("deadline_s", 2.0);
            n.with("concurrency").put("adaptive", true).put("initial", 2).put("min", 1).put("max", 2);
            try (Requester r = new Requester(of(n))) {
                List<CompletableFuture<Outcome>> sent = sendEach(r, 60, 50);
                int timedOut = 0;
                for (Outcome o : all(sent)) {
                    timedOut += PlanContract.TIMEOUT.equals(o.errorKind) && o.attempts > 0 ? 1 : 0;
                }
                check(timedOut >= 3, "attempts cut short by their deadline timed out: " + timedOut);
                equal(2, r.concurrencyLimit(), "the limit");
            }
        }
    }

    @Test
    void test22AnAttemptSentBeforeItsProbationDoesNotJudgeIt() throws Exception {
        // Four requests of one user (routed to the hung replica), the fourth 1.8 s after the others: the first
        // three time out (2 s) and eject it, its probe takes it back on probation (after 10-20 ms), and then the
        // fourth times out too. It was sent while the replica hung, before the probe: it says nothing of the
        // replica since (a replica that came back may never answer what it held while it hung). Only attempts
        // sent on probation judge it.
        try (Web stuck = hung(); Web good = slowOk(0)) {
            ObjectNode n = specOf(stuck.base, good.base);
            n.put("timeout_s", 2.0);
            n.putObject("routing").put("mode", "prefix").put("prefix_bytes", 12);
            List<String> names = List.of("127.0.0.1:" + stuck.port(), "127.0.0.1:" + good.port());
            byte[] user = usersHashedTo(names.get(0), names, 1).get(0)
                    .getBytes(java.nio.charset.StandardCharsets.UTF_8);
            try (Requester r = new Requester(of(n))) {
                List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                for (int i = 0; i < 3; i++) {
                    sent.add(r.sendBody(r.bodyOf("question " + i), "id-" + i, user));
                }
                Thread.sleep(1800);
                sent.add(r.sendBody(r.bodyOf("question 3"), "id-3", user));
                for (Outcome o : all(sent)) {
                    check(o.ok(), "every request answered: " + o.error);
                    equal(2, o.attempts, "attempts (the hung replica's, then the other's)");
                }
                equal(4L, stuck.count("POST", "/v1/completions"), "requests sent to the hung replica");
                Replicas.Replica s = replicaOn(r, stuck);
                equal(1L, r.gateClosures(), "ejections");
                eventually(() -> !s.ejected(), "taken back by its probe");
                equal(1, s.limit(), "on probation");
            }
        }
    }
}
