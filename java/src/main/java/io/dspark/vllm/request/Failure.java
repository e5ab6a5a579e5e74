package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.netty4.io.netty.channel.ConnectTimeoutException;

import java.io.IOException;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.ProtocolException;
import java.net.UnknownHostException;
import java.nio.channels.UnresolvedAddressException;
import java.security.GeneralSecurityException;
import java.security.cert.CertPathValidatorException;
import java.security.cert.CertificateException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLHandshakeException;

/**
 * What went wrong with one attempt (kind, message, retryable; {@link #text()} is "kind: message"; the kinds are
 * PlanContract.ERROR_KINDS), and the one place where what {@link Transport} (Netty, the JDK's
 * sockets and TLS under it) throws becomes one (as {@code connector.server.transport.EXCEPTION_MAP} does for
 * discovery's aiohttp).
 */
final class Failure {
    static final String TLS_HINT = "set 'request.tls-ca-bundle' to the CA that signed the server's certificate "
            + "('request.tls-verify' = 'false' only for a server you trust)";
    private static final ObjectMapper MAPPER =
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    /** An error body larger than this is not a JSON error object worth parsing: its first bytes are the message. */
    static final int ERROR_JSON_MAX_BYTES = 1024 * 1024;
    /** The most code points of an exception's message that an error carries. */
    static final int DETAIL_MAX = 500;

    final String kind;
    final String message;
    final boolean retryable;

    Failure(String kind, String message, boolean retryable) {
        this.kind = kind;
        this.message = Text.validText(message); // (what a Flink STRING, Arrow or UTF-8 can hold)
        this.retryable = retryable;
    }

    String text() {
        return kind + ": " + message;
    }

    @Override
    public String toString() {
        return text();
    }

    static Failure timeout(String message) {
        return new Failure(PlanContract.TIMEOUT, message, true);
    }

    static Failure request(String message) {
        return new Failure(PlanContract.REQUEST, message, false);
    }

    /** A body larger than the limit: raised by the body subscriber, so that the exchange stops there. */
    static final class TooLarge extends IOException {
        private static final long serialVersionUID = 1L;

        TooLarge(String message) {
            super(message);
        }
    }

    /** A body that its Content-Encoding does not decode: the same every time. */
    static final class Undecodable extends IOException {
        private static final long serialVersionUID = 1L;

        Undecodable(String message) {
            super(message);
        }
    }

    /** What an exception of the transport means; {@code headArrived}: the status line had come. */
    static Failure of(Throwable thrown, boolean headArrived, String target) {
        Throwable e = thrown;
        while ((e instanceof CompletionException || e instanceof ExecutionException) && e.getCause() != null) {
            e = e.getCause();
        }
        TooLarge large = find(e, TooLarge.class);
        if (large != null) {
            return new Failure(PlanContract.TOO_LARGE, large.getMessage(), false);
        }
        Undecodable undecodable = find(e, Undecodable.class);
        if (undecodable != null) {
            return new Failure(PlanContract.PROTOCOL, undecodable.getMessage(), false);
        }
        if (find(e, ConnectTimeoutException.class) != null) {
            return new Failure(PlanContract.CONNECT, "connecting timed out: " + target, true);
        }
        SSLException tls = find(e, SSLException.class);
        if (tls != null) {
            return new Failure(PlanContract.TLS, tls(e, tls, target) + "; " + TLS_HINT, false);
        }
        if (find(e, UnresolvedAddressException.class) != null || find(e, UnknownHostException.class) != null) {
            return new Failure(PlanContract.CONNECT, "the host name does not resolve: " + target, true);
        }
        if (find(e, ConnectException.class) != null || find(e, NoRouteToHostException.class) != null) {
            return new Failure(PlanContract.CONNECT, "cannot connect to the server: " + target + ": " + detail(e), true);
        }
        if (find(e, ProtocolException.class) != null) {
            // not retried: the same server answers the same way
            return new Failure(PlanContract.PROTOCOL, "not a valid HTTP/1.1 response: " + detail(e), false);
        }
        if (e instanceof IOException) {
            String detail = detail(e);
            if (detail.toLowerCase(java.util.Locale.ROOT).contains("reset")) {
                return new Failure(PlanContract.STREAM, "the connection was reset: " + detail, true);
            }
            if (headArrived) {
                return new Failure(PlanContract.STREAM, "the response body broke off: " + detail, true);
            }
            return new Failure(PlanContract.STREAM, "the server closed the connection: " + detail, true);
        }
        return new Failure(PlanContract.PROTOCOL, "the request failed: " + detail(e), false);
    }

    private static String tls(Throwable e, SSLException tls, String target) {
        Throwable cert = find(e, CertificateException.class);
        if (cert == null) {
            cert = find(e, CertPathValidatorException.class);
        }
        if (cert == null) {
            cert = find(e, GeneralSecurityException.class);
        }
        if (cert != null) {
            String m = detail(cert);
            if (m.contains("subject alternative name") || m.contains("No name matching")) {
                return "the server's certificate does not match its name: " + target + ": " + m;
            }
            return "the server's certificate does not verify: " + target + ": " + m;
        }
        if (tls instanceof SSLHandshakeException) {
            return "the TLS handshake failed: " + target + ": " + detail(tls);
        }
        return "TLS failed: " + target + ": " + detail(tls);
    }

    private static <T extends Throwable> T find(Throwable e, Class<T> type) {
        for (int depth = 0; e != null && depth < 20; depth++, e = e.getCause()) {
            if (type.isInstance(e)) {
                return type.cast(e);
            }
        }
        return null;
    }

    /** The first message down the cause chain, on one line (the JDK often leaves the outer one empty). */
    static String detail(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            String m = c.getMessage();
            if (m != null && !m.isBlank()) {
                // (bounded: Netty's "not an SSL/TLS record" carries a hex dump of what came, kilobytes of it)
                String one = String.join(" ", m.strip().split("\\s+"));
                return one.codePointCount(0, one.length()) > DETAIL_MAX ? Text.codePoints(one, DETAIL_MAX) + "..."
                        : one;
            }
            if (c.getCause() == c) {
                break;
            }
        }
        return e.getClass().getSimpleName();
    }

    // --- a response that came -----------------------------------------------------------

    /** A non-2xx answer; null for 2xx. */
    static Failure ofStatus(int status, byte[] body, String location) {
        if (status >= 200 && status < 300) {
            return null;
        }
        // 408 too (a server that closed a kept-alive connection as
        // the request went out on it answers 408 to a request it never read; HTTP lets a client repeat it).
        boolean retryable = status == 408 || status == 429 || status == 502 || status == 503 || status == 504;
        String message = errorMessage(body);
        if (status >= 300 && status < 400) {
            message = "redirects are not followed: point 'endpoint' at "
                    + (location != null ? location : "the new address");
        }
        return new Failure(PlanContract.STATUS, "HTTP " + status + ": " + message, retryable);
    }

    /**
     * What an error body says. Bounded: a body over 1 MiB is
     * not parsed, nor is one nested beyond the parser's limit.
     */
    static String errorMessage(byte[] body) {
        JsonNode data = null;
        try {
            data = body.length == 0 || body.length > ERROR_JSON_MAX_BYTES ? null : MAPPER.readTree(body);
        } catch (IOException | RuntimeException e) {
            data = null;
        }
        if (data != null && data.isObject()) {
            JsonNode error = data.has("error") ? data.get("error") : data.get("detail");
            if (error != null && error.isObject() && error.has("message")) {
                return Text.codePoints(pyStr(error.get("message")), 500);
            }
            if (error != null && !error.isNull()) {
                return Text.codePoints(pyStr(error), 500);
            }
        }
        String text = Text.utf8Head(body, 200).strip();
        return text.isEmpty() ? "(empty body)" : text;
    }

    /**
     * The failure of an attempt whose response the code did not foresee (a bug, here or in a library), as
     * worded so: not retried, the same answer would fail the same way.
     */
    static Failure unexpected(Throwable e) {
        String detail = e.getMessage() == null ? "" : String.join(" ", e.getMessage().strip().split("\\s+"));
        if (detail.codePointCount(0, detail.length()) > 300) {
            detail = Text.codePoints(detail, 300) + "...";
        }
        String message = "the client could not handle the response: " + e.getClass().getSimpleName()
                + (detail.isEmpty() ? "" : ": " + detail);
        return new Failure(PlanContract.PROTOCOL, message, false);
    }

    private static String pyStr(JsonNode v) {
        if (v.isTextual()) {
            return v.asText();
        }
        if (v.isNull()) {
            return "None";
        }
        if (v.isBoolean()) {
            return v.asBoolean() ? "True" : "False";
        }
        return v.toString();
    }
}
