/*
 * envd's Java agent: one JShell (jdk.jshell API) driven by envd's Java
 * Jupyter kernel (kernel.py in this directory) over stdin/stdout.
 *
 * Run with the JDK's own launcher in source-file mode (no build step):
 *
 *     java [options] EnvdJShell.java [remote VM option...]
 *
 * or compiled, from the jar scripts/install-deps.sh prebuilds (kernel.py:
 * "Prebuilt agent"): java [options] -cp envd-jshell.jar EnvdJShell ...
 *
 * User code runs in JShell's default execution engine: a second JVM
 * started and controlled through JDI (what the jshell tool does), so state
 * lives there across executions, jshell's stop() ends a running snippet
 * without losing it, and System.exit in user code only ends that JVM
 * (JShell reports it; the kernel starts a new agent).
 *
 * Protocol: frames in both directions, each a type byte, a big-endian
 * int32 length and that many bytes (text is UTF-8).
 *
 *   kernel to agent   'X' code        run code (one cell: any number of snippets)
 *                     'I'             interrupt the running code, if any
 *                     'Q'             quit at once (so does EOF on stdin), killing the
 *                                     execution JVM and every other descendant
 *   agent to kernel   'r' version     ready (sent once, after the default imports ran)
 *                     'o' bytes       the user code's System.out, as it is written
 *                     'e' bytes       the user code's System.err, and the agent's notes
 *                     'v' text        the value of the cell's final expression
 *                     'x' error       ename NUL evalue NUL traceback lines joined by "\n"
 *                     'd' status      end of the cell: "ok", "error" or "interrupted"
 *
 * Every cell ends with exactly one 'd'; 'v' and 'x' come before it.
 */

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;

import jdk.jshell.DeclarationSnippet;
import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.MethodSnippet;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.TypeDeclSnippet;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.VarSnippet;

public final class EnvdJShell {
    /** What the jshell tool imports at start (its DEFAULT startup). */
    private static final String DEFAULT_IMPORTS = String.join("\n",
            "import java.io.*;",
            "import java.math.*;",
            "import java.net.*;",
            "import java.nio.file.*;",
            "import java.util.*;",
            "import java.util.concurrent.*;",
            "import java.util.function.*;",
            "import java.util.prefs.*;",
            "import java.util.regex.*;",
            "import java.util.stream.*;");

    private static final Object WRITE_LOCK = new Object();
    private static DataOutputStream proto;
    private static JShell shell;
    private static volatile boolean closing;

    /** Guarded by STOP_LOCK: a cell is running / an interrupt asked to stop it. */
    private static final Object STOP_LOCK = new Object();
    private static boolean running;
    private static boolean stopRequested;

    private EnvdJShell() {
    }

    public static void main(String[] args) throws Exception {
        proto = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16));
        // Nothing but frames may reach stdout: anything the JShell library
        // or JDI prints goes to stderr (the kernel's log).
        System.setOut(System.err);
        DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(FileDescriptor.in)));

        String engine = System.getProperty("envd.jshell.engine", "jdi:hostname(localhost),timeout(60000)");
        try {
            shell = JShell.builder()
                    .out(new PrintStream(new FrameStream('o'), true, StandardCharsets.UTF_8))
                    .err(new PrintStream(new FrameStream('e'), true, StandardCharsets.UTF_8))
                    .in(new ByteArrayInputStream(new byte[0]))
                    .executionEngine(engine)
                    .remoteVMOptions(args)
                    .build();
        } catch (IllegalStateException e) {
            System.err.println("envd java kernel: cannot start JShell: " + e.getMessage());
            System.exit(2);
            return;
        }
        shell.onShutdown(s -> {
            if (!closing) {
                // The execution JVM ended (System.exit in user code, killed):
                // the kernel sees EOF and starts a new agent.
                System.err.println("envd java kernel: the execution JVM exited");
                Runtime.getRuntime().halt(3);
            }
        });
        for (String imp : DEFAULT_IMPORTS.split("\n")) {
            shell.eval(imp);
        }
        // Start the execution JVM and run code there once, so the first
        // cell does not pay for it.
        shell.eval("{ System.out.flush(); }");
        send('r', Runtime.version().toString());

        BlockingQueue<String> cells = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> readCommands(in, cells), "envd-reader");
        reader.setDaemon(true);
        reader.start();
        while (true) {
            String code = cells.take();
            String status;
            try {
                status = execute(code);
            } catch (RuntimeException e) {
                // A JShell internal failure: report it and keep going.
                sendError("EnvdJavaKernelError", String.valueOf(e), List.of(e.toString()));
                status = "error";
            }
            send('d', status);
        }
    }

    private static void readCommands(DataInputStream in, BlockingQueue<String> cells) {
        try {
            while (true) {
                byte type;
                try {
                    type = in.readByte();
                } catch (EOFException e) {
                    break;
                }
                int len = in.readInt();
                byte[] data = new byte[len];
                in.readFully(data);
                switch (type) {
                    case 'X' -> cells.add(new String(data, StandardCharsets.UTF_8));
                    case 'I' -> interrupt();
                    case 'Q' -> quit();
                    default -> System.err.println("envd java kernel: unknown frame type " + type);
                }
            }
        } catch (IOException e) {
            System.err.println("envd java kernel: reading commands: " + e);
        }
        // The kernel is gone: nothing can be reported anymore.
        quit();
    }

    /**
     * Ends the agent at once, whatever the user code is doing: the
     * execution JVM (and anything the user code started) first, as a JVM
     * stuck in a loop would outlive its debugger.
     */
    private static void quit() {
        closing = true;
        ProcessHandle.current().descendants().forEach(ProcessHandle::destroyForcibly);
        Runtime.getRuntime().halt(0);
    }

    /**
     * Stops the running cell: JShell's stop() ends the snippet that is
     * running user code; it is repeated until the cell ends because the
     * interrupt may come while a snippet is still being compiled (stop()
     * does nothing then), and the cell runs no further snippet.
     */
    private static void interrupt() {
        synchronized (STOP_LOCK) {
            if (!running || stopRequested) {
                return;
            }
            stopRequested = true;
        }
        Thread t = new Thread(() -> {
            while (true) {
                synchronized (STOP_LOCK) {
                    if (!running || !stopRequested) {
                        return;
                    }
                }
                try {
                    shell.stop();
                } catch (RuntimeException e) {
                    System.err.println("envd java kernel: stop: " + e);
                }
                synchronized (STOP_LOCK) {
                    try {
                        STOP_LOCK.wait(100);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
        }, "envd-stop");
        t.setDaemon(true);
        t.start();
    }

    private static boolean stopRequested() {
        synchronized (STOP_LOCK) {
            return stopRequested;
        }
    }

    /** Runs one cell, snippet by snippet; returns the status for 'd'. */
    private static String execute(String code) {
        synchronized (STOP_LOCK) {
            running = true;
            stopRequested = false;
        }
        try {
            return executeSnippets(code);
        } finally {
            synchronized (STOP_LOCK) {
                running = false;
                stopRequested = false;
                STOP_LOCK.notifyAll();
            }
        }
    }

    private static String executeSnippets(String code) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = code;
        String value = null; // the display of the last snippet, if it was an expression
        while (!rest.isBlank()) {
            if (stopRequested()) {
                return interrupted();
            }
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
            String src;
            switch (ci.completeness()) {
                case COMPLETE, COMPLETE_WITH_SEMI -> {
                    src = ci.source();
                    rest = ci.remaining();
                }
                case EMPTY -> {
                    // Only comments or semicolons are left.
                    if (ci.remaining().length() >= rest.length()) {
                        rest = "";
                    } else {
                        rest = ci.remaining();
                    }
                    continue;
                }
                default -> {
                    // Incomplete or not understood: the compiler says why.
                    src = rest;
                    rest = "";
                }
            }
            value = null;
            List<SnippetEvent> events = shell.eval(src);
            boolean seen = false;
            for (SnippetEvent ev : events) {
                if (ev.causeSnippet() != null) {
                    continue; // an update of another snippet it affects
                }
                seen = true;
                Snippet sn = ev.snippet();
                if (ev.exception() != null) {
                    if (stopRequested()) {
                        return interrupted(); // what the stop made the code throw
                    }
                    reportException(ev.exception());
                    return "error";
                }
                if (ev.status() == Snippet.Status.REJECTED) {
                    reportRejected(sn);
                    return "error";
                }
                if (stopRequested()) {
                    return interrupted();
                }
                noteUnresolved(ev);
                if (isExpression(sn) && ev.value() != null) {
                    value = display(sn, ev.value());
                }
            }
            if (!seen) {
                sendError("CompilationException", "incomplete input", List.of("incomplete input:", src));
                return "error";
            }
        }
        if (value != null) {
            send('v', value);
        }
        return "ok";
    }

    private static String interrupted() {
        sendError("KeyboardInterrupt", "interrupted", List.of("KeyboardInterrupt: the execution was stopped"));
        return "interrupted";
    }

    private static boolean isExpression(Snippet sn) {
        if (sn instanceof ExpressionSnippet) {
            return true;
        }
        return sn instanceof VarSnippet && sn.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
    }

    private static String typeName(Snippet sn) {
        if (sn instanceof VarSnippet v) {
            return v.typeName();
        }
        if (sn instanceof ExpressionSnippet e) {
            return e.typeName();
        }
        return "";
    }

    /**
     * The text of a value: its toString(), like System.out.println would
     * print it. JShell quotes and escapes strings and chars ("a\tb",
     * 'c'), which is undone here; other values are already toString().
     */
    static String display(Snippet sn, String value) {
        String type = typeName(sn);
        boolean isString = type.equals("String") || type.equals("java.lang.String");
        boolean isChar = type.equals("char") || type.equals("Character") || type.equals("java.lang.Character");
        if (isString && value.length() >= 2 && value.startsWith("\"") && value.endsWith("\"")) {
            return unescape(value.substring(1, value.length() - 1));
        }
        if (isChar && value.length() >= 2 && value.startsWith("'") && value.endsWith("'")) {
            return unescape(value.substring(1, value.length() - 1));
        }
        return value;
    }

    /** Undoes JShell's escapes: \b \t \n \f \r \" \' \\ and \ooo (octal). */
    static String unescape(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c != '\\' || i + 1 == s.length()) {
                b.append(c);
                continue;
            }
            char n = s.charAt(++i);
            switch (n) {
                case 'b' -> b.append('\b');
                case 't' -> b.append('\t');
                case 'n' -> b.append('\n');
                case 'f' -> b.append('\f');
                case 'r' -> b.append('\r');
                case '0', '1', '2', '3', '4', '5', '6', '7' -> {
                    int end = i;
                    while (end < s.length() && end < i + 3 && s.charAt(end) >= '0' && s.charAt(end) <= '7') {
                        end++;
                    }
                    b.append((char) Integer.parseInt(s.substring(i, end), 8));
                    i = end - 1;
                }
                default -> b.append(n); // \" \' \\
            }
        }
        return b.toString();
    }

    /** Tells (on stderr) that a declaration waits for something undeclared. */
    private static void noteUnresolved(SnippetEvent ev) {
        if (ev.status() != Snippet.Status.RECOVERABLE_DEFINED && ev.status() != Snippet.Status.RECOVERABLE_NOT_DEFINED) {
            return;
        }
        if (!(ev.snippet() instanceof DeclarationSnippet ds)) {
            return;
        }
        String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
        if (!deps.isEmpty()) {
            send('e', "note: " + describe(ds) + " cannot be used until " + deps + " is declared\n");
        }
    }

    private static String describe(DeclarationSnippet ds) {
        if (ds instanceof MethodSnippet m) {
            return "method " + m.name() + "(" + m.parameterTypes() + ")";
        }
        if (ds instanceof TypeDeclSnippet) {
            return "class " + ds.name();
        }
        if (ds instanceof VarSnippet) {
            return "variable " + ds.name();
        }
        return ds.name();
    }

    // ------------------------------------------------------------------
    // errors

    /** The name a user wrote for a class declared in JShell ("REPL.$JShell$12$Foo" is Foo). */
    static String cleanClass(String name) {
        if (name == null) {
            return "";
        }
        return name.replaceAll("^REPL\\.\\$JShell\\$\\d+\\$", "");
    }

    private static void reportException(JShellException ex) {
        if (ex instanceof EvalException ee) {
            String name = cleanClass(ee.getExceptionClassName());
            String msg = ee.getMessage() == null ? "" : ee.getMessage();
            List<String> tb = new ArrayList<>();
            appendTrace(tb, ee, "");
            sendError(name, msg, tb);
            return;
        }
        if (ex instanceof UnresolvedReferenceException ure) {
            DeclarationSnippet ds = ure.getSnippet();
            String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
            String msg = describe(ds) + " cannot be used until " + deps + " is declared";
            List<String> tb = new ArrayList<>();
            tb.add("UnresolvedReferenceException: " + msg);
            for (StackTraceElement ste : ure.getStackTrace()) {
                tb.add("\tat " + frame(ste));
            }
            sendError("UnresolvedReferenceException", msg, tb);
            return;
        }
        sendError(ex.getClass().getName(), String.valueOf(ex.getMessage()), List.of(ex.toString()));
    }

    private static void appendTrace(List<String> tb, EvalException e, String prefix) {
        String head = cleanClass(e.getExceptionClassName());
        if (e.getMessage() != null) {
            head += ": " + e.getMessage();
        }
        tb.add(prefix + head);
        for (StackTraceElement ste : e.getStackTrace()) {
            tb.add("\tat " + frame(ste));
        }
        if (e.getCause() instanceof EvalException cause && tb.size() < 1000) {
            appendTrace(tb, cause, "Caused by: ");
        }
    }

    /** A stack frame as Java prints it; JShell code shows as (#SNIPPET:LINE). */
    private static String frame(StackTraceElement ste) {
        String cls = cleanClass(ste.getClassName());
        String method = ste.getMethodName() == null ? "" : ste.getMethodName();
        String where = cls.isEmpty() ? method : method.isEmpty() ? cls : cls + "." + method;
        String file = ste.getFileName();
        String loc;
        if (ste.isNativeMethod()) {
            loc = "Native Method";
        } else if (file == null) {
            loc = "Unknown Source";
        } else if (ste.getLineNumber() >= 0) {
            loc = file + ":" + ste.getLineNumber();
        } else {
            loc = file;
        }
        return where + "(" + loc + ")";
    }

    /** A snippet the compiler refused: every error with its line and a caret. */
    private static void reportRejected(Snippet sn) {
        String src = sn.source();
        List<String> tb = new ArrayList<>();
        String first = null;
        for (Diag d : shell.diagnostics(sn).collect(Collectors.toList())) {
            if (!d.isError()) {
                continue;
            }
            String msg = d.getMessage(Locale.ROOT);
            if (first == null) {
                first = msg.lines().findFirst().orElse(msg);
            }
            tb.add("error: " + msg);
            long pos = d.getPosition();
            if (pos >= 0 && pos <= src.length()) {
                int start = src.lastIndexOf('\n', (int) pos - 1) + 1;
                int end = src.indexOf('\n', (int) pos);
                if (end < 0) {
                    end = src.length();
                }
                tb.add(src.substring(start, end));
                tb.add(" ".repeat((int) pos - start) + "^");
            }
        }
        if (first == null) {
            first = "the snippet was rejected";
            if (sn instanceof DeclarationSnippet ds) {
                String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
                if (!deps.isEmpty()) {
                    first = describe(ds) + " cannot be declared until " + deps + " is declared";
                }
            }
            tb.add("error: " + first);
            tb.add(src);
        }
        sendError("CompilationException", first, tb);
    }

    private static void sendError(String ename, String evalue, List<String> traceback) {
        send('x', ename + "\0" + evalue + "\0" + String.join("\n", traceback));
    }

    // ------------------------------------------------------------------
    // frames

    private static void send(char type, String text) {
        send(type, text.getBytes(StandardCharsets.UTF_8), 0, -1);
    }

    private static void send(char type, byte[] data, int off, int len) {
        if (len < 0) {
            len = data.length - off;
        }
        synchronized (WRITE_LOCK) {
            try {
                proto.writeByte(type);
                proto.writeInt(len);
                proto.write(data, off, len);
                proto.flush();
            } catch (IOException e) {
                // The kernel is gone.
                Runtime.getRuntime().halt(1);
            }
        }
    }

    /** Sends every write of the user code's System.out or System.err as a frame. */
    private static final class FrameStream extends OutputStream {
        private final char type;

        FrameStream(char type) {
            this.type = type;
        }

        @Override
        public void write(int b) {
            send(type, new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            if (len > 0) {
                send(type, Arrays.copyOfRange(b, off, off + len), 0, len);
            }
        }
    }
}
