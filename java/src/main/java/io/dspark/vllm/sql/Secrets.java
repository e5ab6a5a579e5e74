package io.dspark.vllm.sql;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The secrets of a table's or model's options, masked in text a person reads: the values of the secret options
 * ({@link TableOptions#SECRET_KEYS}, 'api-key'), what follows the '?' of a response store's URI (Kafka client
 * settings: a SASL password) and a user name or password in a URL. Flink repeats a table's options in every planning error ("Table options are: ...")
 * and {@code SHOW CREATE MODEL} prints them; the SQL runner's output goes through {@link #masking}.
 *
 * <p>Options are written as {@code 'key'='value'} (Flink's lists), {@code 'key' = 'value'} (SQL, SHOW CREATE) or
 * {@code key=value} (a map's toString).
 */
final class Secrets {
    private Secrets() {}

    static final String MASK = "******";

    private static final List<Pattern> VALUES = new ArrayList<>();

    static {
        List<String> keys = new ArrayList<>(TableOptions.SECRET_KEYS);
        for (String key : keys) {
            String k = Pattern.quote(key);
            VALUES.add(Pattern.compile("('" + k + "'\\s*=\\s*')((?:[^']|'')*)(')"));
            VALUES.add(Pattern.compile("((?<![\\w.'-])" + k + "=)([^,}\\s]*)()"));
        }
        // a store's query: after the '?' of 'request.store', in any of the forms
        VALUES.add(Pattern.compile("('request\\.store'\\s*=\\s*'[^'?]*\\?)((?:[^']|'')*)(')"));
        VALUES.add(Pattern.compile("((?<![\\w.'-])request\\.store=[^?,}\\s]*\\?)([^,}\\s]*)()"));
        // a Kafka store's URI anywhere (a message naming the store, a stack trace)
        VALUES.add(Pattern.compile("(kafka://[^\\s'\"?]*\\?)([^\\s'\"]*)()"));
        // a user name or password in a URL (an endpoint the planner refuses, repeated in Flink's options list)
        VALUES.add(Pattern.compile("(https?://)([^/\\s'\"@]+)(@)"));
    }

    /** {@code text} with every secret value masked. */
    static String mask(String text) {
        if (text == null) {
            return null;
        }
        String out = text;
        for (Pattern p : VALUES) {
            Matcher m = p.matcher(out);
            if (m.find()) {
                StringBuilder b = new StringBuilder();
                do {
                    m.appendReplacement(b, Matcher.quoteReplacement(
                            m.group(1) + (m.group(2).isEmpty() || m.group(2).startsWith(MASK) ? m.group(2) : MASK)
                                    + m.group(3))); // (a value masked by an earlier form keeps what follows it)
                } while (m.find());
                m.appendTail(b);
                out = b.toString();
            }
        }
        return out;
    }

    /**
     * A stream that writes {@code out}'s lines masked ({@link #mask}), each as soon as it ends; a last line with
     * no end is written when the JVM exits.
     */
    static PrintStream masking(PrintStream out) {
        Lines lines = new Lines(out);
        Runtime.getRuntime().addShutdownHook(new Thread(lines::close, "dspark-vllm masked output"));
        return new PrintStream(lines, true, StandardCharsets.UTF_8);
    }

    private static final class Lines extends OutputStream {
        private final PrintStream out;
        private final ByteArrayOutputStream line = new ByteArrayOutputStream();

        Lines(PrintStream out) {
            this.out = out;
        }

        @Override
        public synchronized void write(int b) {
            line.write(b);
            if (b == '\n') {
                emit();
            }
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) {
            for (int i = off; i < off + len; i++) {
                write(b[i]);
            }
        }

        private void emit() {
            out.print(mask(line.toString(StandardCharsets.UTF_8)));
            out.flush();
            line.reset();
        }

        @Override
        public synchronized void close() {
            if (line.size() > 0) {
                emit();
            }
            out.flush();
        }
    }
}
