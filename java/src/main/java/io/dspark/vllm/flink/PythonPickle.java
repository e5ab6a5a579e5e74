package io.dspark.vllm.flink;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The payload of a Python function built in Java: a pickle (protocol 3) that calls {@code module.function(args)}
 * when PyFlink unpickles it on the worker, e.g. {@code connector.flink.runtime.parse_function(plan, columns)}.
 * PyFlink unpickles function payloads with cloudpickle, which reads standard pickles.
 */
final class PythonPickle {

    private PythonPickle() {}

    /** A pickle of the call {@code module.function(*args)}; each argument is a byte[] or a String. */
    static byte[] call(String module, String function, Object... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0x80); // PROTO 3
        out.write(3);
        writeAscii(out, "c" + module + "\n" + function + "\n"); // GLOBAL
        out.write('('); // MARK
        for (Object arg : args) {
            byte[] data;
            if (arg instanceof byte[]) {
                data = (byte[]) arg;
                out.write('B'); // BINBYTES
            } else if (arg instanceof String) {
                data = ((String) arg).getBytes(StandardCharsets.UTF_8);
                out.write('X'); // BINUNICODE
            } else {
                throw new IllegalArgumentException("a pickled argument must be byte[] or String");
            }
            writeInt(out, data.length);
            out.write(data, 0, data.length);
        }
        out.write('t'); // TUPLE from MARK
        out.write('R'); // REDUCE: call
        out.write('.'); // STOP
        return out.toByteArray();
    }

    private static void writeAscii(ByteArrayOutputStream out, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.US_ASCII);
        out.write(bytes, 0, bytes.length);
    }

    private static void writeInt(ByteArrayOutputStream out, int value) {
        for (int i = 0; i < 4; i++) {
            out.write((value >>> (8 * i)) & 0xff); // little-endian
        }
    }
}
