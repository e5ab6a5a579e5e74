package io.dspark.vllm.parse;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * The Python planner's plan document ({@code connector.parse.native.NativePlan}, every body column of a profile),
 * made by the Python named by {@code -Ddspark.python} (java/build_jar.py passes its own): the plan the JUnit tests
 * of the parse step and of the JNI boundary give the core.
 */
public final class PythonPlan {

    private PythonPlan() {}

    public static String of(String profile) throws IOException, InterruptedException {
        String python = System.getProperty("dspark.python", "python3");
        Process p = new ProcessBuilder(python, "-c", String.join("\n",
                "import sys",
                "from connector.parse.native import NativePlan",
                "from connector.profiles import load_profile",
                "from connector.types.columns import body_columns",
                "p = load_profile(sys.argv[1])",
                "sys.stdout.buffer.write(NativePlan.of(body_columns(p), p.created_unit, p.content_properties).document)"),
                profile)
                .redirectErrorStream(true).start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (InputStream in = p.getInputStream()) {
            in.transferTo(out);
        }
        String document = out.toString(StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
            p.destroyForcibly();
            throw new IOException("the Python planner gave no plan for '" + profile + "': " + document);
        }
        return document;
    }
}
