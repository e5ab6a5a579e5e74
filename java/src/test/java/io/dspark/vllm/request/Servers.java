package io.dspark.vllm.request;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsParameters;
import com.sun.net.httpserver.HttpsServer;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.TrustManagerFactory;

/** Real servers on 127.0.0.1 for the tests: com.sun.net.httpserver, and raw sockets for broken answers. */
final class Servers {
    private Servers() {}

    static final ObjectMapper JSON = new ObjectMapper();
    static final String SECRET = "sk-test-secret-4711";

    /** A request spec as the planner writes it, pointing at {@code base}; tests change what they need. */
    static ObjectNode spec(String base) {
        ObjectNode n = JSON.createObjectNode();
        n.put("version", RequestSpec.VERSION);
        n.put("url", base + "/v1/completions");
        n.put("health_url", base + "/health");
        ObjectNode h = n.putObject("headers");
        h.put("user-agent", "dspark-vllm/0.1");
        h.put("content-type", "application/json");
        h.put("authorization", "Bearer " + SECRET);
        n.put("body_prefix", "{\"model\":\"m\",\"prompt\":");
        n.put("body_suffix", ",\"max_tokens\":8}");
        n.put("timeout_s", 10.0);
        n.put("connect_timeout_s", 2.0);
        n.put("deadline_s", 20.0);
        n.putNull("max_attempts");
        n.put("backoff_initial_s", 0.02);
        n.put("backoff_max_s", 0.1);
        n.put("max_retry_after_s", 60.0);
        n.put("hold_while_down", false);
        n.putNull("rate_limit");
        n.put("max_body_bytes", 1 << 20);
        ObjectNode tls = n.putObject("tls");
        tls.put("verify", true);
        tls.putNull("ca_bundle");
        tls.putNull("client_cert");
        tls.putNull("client_key");
        ObjectNode c = n.putObject("concurrency");
        c.put("adaptive", false);
        c.put("initial", 8);
        c.put("min", 1);
        c.put("max", 8);
        return n;
    }

    /**
     * The spec of {@code n}, which a test wrote in part: one replica (its url) where it names none, and the
     * routing's defaults (connector.options) for the keys it leaves out, as the planner would write them.
     */
    static RequestSpec of(ObjectNode n) {
        return RequestSpec.fromJson(complete(n));
    }

    static ObjectNode complete(ObjectNode n) {
        ObjectNode c = n.deepCopy();
        if (!c.has("urls")) {
            c.putArray("urls").add(c.get("url").asText());
            c.putArray("health_urls").add(c.get("health_url").asText());
        }
        ObjectNode r = c.has("routing") ? (ObjectNode) c.get("routing") : c.putObject("routing");
        if (!r.has("mode")) {
            r.put("mode", "least-loaded");
        }
        if (!r.has("prefix_bytes")) {
            r.put("prefix_bytes", 256);
        }
        if (!r.has("load_bound")) {
            r.put("load_bound", 1.25);
        }
        if (!r.has("resolve_interval_s")) {
            r.put("resolve_interval_s", 30.0);
        }
        return c;
    }

    /** One request as the server saw it. */
    static final class Seen {
        final String method;
        final String path;
        final Map<String, List<String>> headers;
        final byte[] body;
        final long atNs;

        Seen(HttpExchange x, byte[] body) {
            this.method = x.getRequestMethod();
            this.path = x.getRequestURI().getPath();
            this.headers = Map.copyOf(x.getRequestHeaders());
            this.body = body;
            this.atNs = System.nanoTime();
        }

        String header(String name) {
            for (Map.Entry<String, List<String>> e : headers.entrySet()) {
                if (e.getKey().equalsIgnoreCase(name)) {
                    return e.getValue().get(0);
                }
            }
            return null;
        }
    }

    interface Handler {
        void handle(HttpExchange x, Seen seen) throws Exception;
    }

    /** An HTTP (or HTTPS) server whose handlers run on many threads, counting what it sees. */
    static final class Web implements AutoCloseable {
        static {
            // com.sun.net.httpserver leaves Nagle on: a response's head and body then wait for the client's
            // delayed ACK (40 ms), which a rate measurement would blame on the client. Set here, in the class
            // that creates the servers (before the JDK reads it, once): a static block of the outer class ran
            // only once a test had called one of its methods, after its first server, and so never took effect.
            System.setProperty("sun.net.httpserver.nodelay", "true");
        }

        final HttpServer server;
        final String base;
        final List<Seen> seen = Collections.synchronizedList(new ArrayList<>());
        final AtomicInteger concurrent = new AtomicInteger();
        final AtomicInteger maxConcurrent = new AtomicInteger();
        final Map<String, Handler> handlers = new ConcurrentHashMap<>();
        private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "test-server");
            t.setDaemon(true);
            return t;
        });

        Web(Handler completions) throws IOException {
            this(completions, 0, null, false);
        }

        Web(Handler completions, int port, SSLContext tls, boolean needClientAuth) throws IOException {
            this(completions, InetAddress.getLoopbackAddress(), port, tls, needClientAuth);
        }

        /** On {@code bind} (another loopback address, e.g. 127.0.0.2: one of a name's several replicas). */
        Web(Handler completions, InetAddress bind, int port, SSLContext tls, boolean needClientAuth)
                throws IOException {
            InetSocketAddress at = new InetSocketAddress(bind, port);
            if (tls != null) {
                HttpsServer s = HttpsServer.create(at, 200);
                s.setHttpsConfigurator(new HttpsConfigurator(tls) {
                    @Override
                    public void configure(HttpsParameters params) {
                        SSLParameters p = tls.getDefaultSSLParameters();
                        p.setNeedClientAuth(needClientAuth);
                        params.setSSLParameters(p);
                    }
                });
                server = s;
            } else {
                server = HttpServer.create(at, 200);
            }
            handlers.put("/v1/completions", completions);
            handlers.put("/health", (x, s) -> respond(x, 200, ""));
            HttpHandler root = x -> {
                byte[] body = x.getRequestBody().readAllBytes();
                Seen s = new Seen(x, body);
                seen.add(s);
                int now = concurrent.incrementAndGet();
                maxConcurrent.accumulateAndGet(now, Math::max);
                // Uncounted before the answer goes out (respond), not after: a client that sends its next request
                // on the answer must not find this one still counted.
                java.util.concurrent.atomic.AtomicBoolean left = new java.util.concurrent.atomic.AtomicBoolean();
                Runnable leave = () -> {
                    if (left.compareAndSet(false, true)) {
                        concurrent.decrementAndGet();
                    }
                };
                x.setAttribute(LEAVE, leave);
                try {
                    Handler h = handlers.get(s.path);
                    if (h == null) {
                        respond(x, 404, "{\"detail\":\"Not Found\"}");
                    } else {
                        h.handle(x, s);
                    }
                } catch (Exception e) {
                    // the client went away: nothing to answer
                } finally {
                    leave.run();
                    x.close();
                }
            };
            server.createContext("/", root);
            server.setExecutor(pool);
            server.start();
            base = (tls != null ? "https" : "http") + "://" + bind.getHostAddress() + ":" + server.getAddress().getPort();
        }

        int port() {
            return server.getAddress().getPort();
        }

        List<Seen> posts() {
            synchronized (seen) {
                List<Seen> out = new ArrayList<>();
                for (Seen s : seen) {
                    if (s.method.equals("POST")) {
                        out.add(s);
                    }
                }
                return out;
            }
        }

        long count(String method, String path) {
            synchronized (seen) {
                return seen.stream().filter(s -> s.method.equals(method) && s.path.equals(path)).count();
            }
        }

        @Override
        public void close() {
            server.stop(0);
            pool.shutdownNow();
        }
    }

    /** The exchange's attribute that uncounts it from {@link Web#concurrent} (once). */
    static final String LEAVE = "dspark.leave";

    static void respond(HttpExchange x, int status, String body, String... headers) throws IOException {
        Object leave = x.getAttribute(LEAVE);
        if (leave instanceof Runnable) {
            ((Runnable) leave).run();
        }
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i + 1 < headers.length; i += 2) {
            x.getResponseHeaders().add(headers[i], headers[i + 1]);
        }
        x.getResponseHeaders().add("content-type", "application/json");
        x.sendResponseHeaders(status, bytes.length == 0 ? -1 : bytes.length);
        if (bytes.length > 0) {
            try (OutputStream out = x.getResponseBody()) {
                out.write(bytes);
            }
        }
    }

    static final String OK_BODY = "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
            + "\"text\":\"hi\",\"finish_reason\":\"stop\"}]}";

    /** A raw socket server: each connection gets the same script (after its request was read). */
    interface Script {
        void run(Socket s, InputStream in, OutputStream out) throws Exception;
    }

    static final class Raw implements AutoCloseable {
        final ServerSocket socket;
        final String base;
        final AtomicInteger connections = new AtomicInteger();
        /** The connections this server has closed (its script ended). */
        final AtomicInteger closed = new AtomicInteger();
        private final Thread acceptor;

        Raw(Script script) throws IOException {
            this(script, true);
        }

        /** {@code readFirst}: read the request before the script runs (else the script reads it, if at all). */
        Raw(Script script, boolean readFirst) throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            base = "http://127.0.0.1:" + socket.getLocalPort();
            acceptor = new Thread(() -> {
                while (!socket.isClosed()) {
                    try {
                        Socket s = socket.accept();
                        connections.incrementAndGet();
                        Thread t = new Thread(() -> {
                            try (s) {
                                InputStream in = s.getInputStream();
                                if (readFirst) {
                                    readRequest(in);
                                }
                                script.run(s, in, s.getOutputStream());
                            } catch (Exception e) {
                                // the client went away
                            }
                            closed.incrementAndGet();
                        });
                        t.setDaemon(true);
                        t.start();
                    } catch (IOException e) {
                        return;
                    }
                }
            });
            acceptor.setDaemon(true);
            acceptor.start();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    /** Reads one request's head and its Content-Length body; returns its request line ("POST /v1/... HTTP/1.1"). */
    static String readRequest(InputStream in) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        int length = 0;
        String first = null;
        while (true) {
            int c = in.read();
            if (c < 0) {
                throw new IOException("EOF");
            }
            if (c == '\n') {
                String l = line.toString(StandardCharsets.ISO_8859_1).strip();
                line.reset();
                if (l.isEmpty()) {
                    break;
                }
                first = first == null ? l : first;
                if (l.toLowerCase().startsWith("content-length:")) {
                    length = Integer.parseInt(l.substring(15).strip());
                }
            } else {
                line.write(c);
            }
        }
        in.readNBytes(length);
        return first;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    // --- TLS material, made with the JDK's keytool ---------------------------------------------

    static final String PASSWORD = "changeit";

    /** A self-signed EC key pair in {@code dir/name.p12}, its certificate in {@code dir/name.pem}. */
    static void keyPair(Path dir, String name, String dname, String san) throws Exception {
        keyPair(dir, name, dname, san, false);
    }

    /** The same; {@code rsa}: an RSA key (2048 bits) rather than EC P-256. */
    static void keyPair(Path dir, String name, String dname, String san, boolean rsa) throws Exception {
        Path store = dir.resolve(name + ".p12");
        List<String> gen = new ArrayList<>(List.of(keytool(), "-genkeypair", "-alias", name, "-validity", "2",
                "-dname", dname, "-keystore", store.toString(), "-storetype", "PKCS12", "-storepass", PASSWORD,
                "-keypass", PASSWORD));
        gen.addAll(rsa ? List.of("-keyalg", "RSA", "-keysize", "2048") : List.of("-keyalg", "EC", "-groupname",
                "secp256r1"));
        if (san != null) {
            gen.add("-ext");
            gen.add("san=" + san);
        }
        run(gen);
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(store)) {
            ks.load(in, PASSWORD.toCharArray());
        }
        Files.writeString(dir.resolve(name + ".pem"), pem("CERTIFICATE", ks.getCertificate(name).getEncoded()));
    }

    static String pem(String type, byte[] der) {
        return "-----BEGIN " + type + "-----\n"
                + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der)
                + "\n-----END " + type + "-----\n";
    }

    /** The private key of {@code dir/name.p12} as PKCS#8 PEM in {@code dir/name.key}. */
    static Path privateKeyPem(Path dir, String name) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(dir.resolve(name + ".p12"))) {
            ks.load(in, PASSWORD.toCharArray());
        }
        byte[] der = ks.getKey(name, PASSWORD.toCharArray()).getEncoded();
        Path out = dir.resolve(name + ".key");
        Files.writeString(out, pem("PRIVATE KEY", der));
        return out;
    }

    /**
     * The RSA private key of {@code dir/name.p12} as PKCS#1 PEM ("BEGIN RSA PRIVATE KEY", what {@code openssl
     * genrsa -traditional} writes) in {@code dir/name.rsa.key}: the OCTET STRING inside its PKCS#8 encoding.
     */
    static Path rsaPrivateKeyPem(Path dir, String name) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(dir.resolve(name + ".p12"))) {
            ks.load(in, PASSWORD.toCharArray());
        }
        byte[] der = ks.getKey(name, PASSWORD.toCharArray()).getEncoded();
        // SEQUENCE { INTEGER 0, SEQUENCE { rsaEncryption, NULL }, OCTET STRING { RSAPrivateKey } }
        int i = 1 + lengthOfLength(der, 1); // into the outer SEQUENCE
        i += 3; // INTEGER 0
        i += 2 + (der[i + 1] & 0xff); // the AlgorithmIdentifier (short form)
        if (der[i] != 0x04) {
            throw new IllegalStateException("not a PKCS#8 RSA key");
        }
        int length = length(der, i + 1);
        int start = i + 1 + lengthOfLength(der, i + 1);
        byte[] pkcs1 = Arrays.copyOfRange(der, start, start + length);
        Path out = dir.resolve(name + ".rsa.key");
        Files.writeString(out, pem("RSA PRIVATE KEY", pkcs1));
        return out;
    }

    private static int lengthOfLength(byte[] der, int at) {
        int first = der[at] & 0xff;
        return first < 0x80 ? 1 : 1 + (first & 0x7f);
    }

    private static int length(byte[] der, int at) {
        int first = der[at] & 0xff;
        if (first < 0x80) {
            return first;
        }
        int n = 0;
        for (int k = 1; k <= (first & 0x7f); k++) {
            n = (n << 8) | (der[at + k] & 0xff);
        }
        return n;
    }

    /** A server's TLS context: its own key pair, and (for client certificates) one certificate it trusts. */
    static SSLContext serverTls(Path dir, String name, String... trustedClients) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(dir.resolve(name + ".p12"))) {
            ks.load(in, PASSWORD.toCharArray());
        }
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, PASSWORD.toCharArray());
        TrustManagerFactory tmf = null;
        if (trustedClients.length > 0) {
            KeyStore only = KeyStore.getInstance("PKCS12");
            only.load(null, null);
            for (String client : trustedClients) {
                KeyStore trust = KeyStore.getInstance("PKCS12");
                try (InputStream in = Files.newInputStream(dir.resolve(client + ".p12"))) {
                    trust.load(in, PASSWORD.toCharArray());
                }
                only.setCertificateEntry(client, trust.getCertificate(client));
            }
            tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(only);
        }
        SSLContext c = SSLContext.getInstance("TLS");
        c.init(kmf.getKeyManagers(), tmf == null ? null : tmf.getTrustManagers(), null);
        return c;
    }

    private static String keytool() {
        return Path.of(System.getProperty("java.home"), "bin", "keytool").toString();
    }

    private static void run(List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException("keytool failed: " + out);
        }
    }
}
