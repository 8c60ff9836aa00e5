/* CuratorDriver.java - Curator 5.4's locks driven line by line, for test_interop.py */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.data.Stat;

/*
 * Usage: java CuratorDriver <connect-string> <session-timeout-ms>
 *
 * One Curator client (one ZooKeeper session) for every lock, so that one
 * JVM serves a whole test file. Commands on stdin, one a line; answers on
 * stdout, one a line, each printed when it happens (a test waits for them
 * instead of sleeping):
 *
 *   acquire ID PATH mutex|read|write [DATA]
 *       InterProcessMutex, or InterProcessReadWriteLock's read or write
 *       lock, on PATH, acquired in a thread of its own (Curator ties a
 *       hold to the thread that took it); DATA is the node's data
 *       (default "curator-ID"). Answers `acquired ID NODE CZXID PZXID`
 *       once it holds (NODE the lock node's name, CZXID its creation's
 *       zxid, PZXID the lock path's pzxid read then), `error ID ...` if
 *       it fails.
 *   release ID     answers `released ID`
 *   cancel ID      ends it whatever its state: interrupts a waiting
 *                  acquire (Curator deletes its node), `cancelled ID`;
 *                  releases a held lock, `released ID`
 *   quit           exits; the session ends with the process
 *
 * At start, `ready` once the session is connected. Curator's own log
 * (slf4j) goes to stderr.
 */
public final class CuratorDriver {
    private static CuratorFramework client;
    private static final Map<String, Holder> holders = new ConcurrentHashMap<>();
    private static Method lockPath;

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /* One lock and the thread that takes and releases it. */
    private static final class Holder extends Thread {
        private final String id;
        private final InterProcessMutex lock;
        private final BlockingQueue<String> todo = new LinkedBlockingQueue<>();

        Holder(String id, InterProcessMutex lock) {
            this.id = id;
            this.lock = lock;
            setDaemon(true);
        }

        @Override
        public void run() {
            try {
                lock.acquire();
            } catch (Exception e) {
                holders.remove(id);
                if (e instanceof InterruptedException || Thread.currentThread().isInterrupted())
                    say("cancelled " + id);
                else
                    say("error " + id + " acquire: " + e);
                return;
            }
            try {
                String path = (String) lockPath.invoke(lock);
                String parent = path.substring(0, path.lastIndexOf('/'));
                Stat st = client.checkExists().forPath(path);
                Stat pst = client.checkExists().forPath(parent);
                say("acquired " + id + " " + path.substring(path.lastIndexOf('/') + 1) + " "
                    + (st == null ? -1 : st.getCzxid()) + " "
                    + (pst == null ? -1 : pst.getPzxid()));
            } catch (Exception e) {
                say("error " + id + " stat: " + e);
            }
            try {
                todo.take();
            } catch (InterruptedException e) {
                /* a cancel after the grant: release all the same */
            }
            try {
                lock.release();
                say("released " + id);
            } catch (Exception e) {
                say("error " + id + " release: " + e);
            }
            holders.remove(id);
        }
    }

    /* A mutex whose node carries our data (Curator's default is the host's address). */
    private static final class DataMutex extends InterProcessMutex {
        private final byte[] data;

        DataMutex(CuratorFramework c, String path, byte[] data) {
            super(c, path);
            this.data = data;
        }

        @Override
        protected byte[] getLockNodeBytes() {
            return data;
        }
    }

    private static void command(String line) {
        String[] w = line.trim().split("\\s+");
        if (w.length == 0 || w[0].isEmpty())
            return;
        String id = w.length > 1 ? w[1] : "-";
        switch (w[0]) {
        case "acquire": {
            if (w.length < 4 || holders.containsKey(id)) {
                say("error " + id + " usage: acquire ID PATH mutex|read|write [DATA] (ID unused)");
                return;
            }
            byte[] data = (w.length > 4 ? w[4] : "curator-" + id).getBytes(StandardCharsets.UTF_8);
            InterProcessMutex lock;
            if (w[3].equals("mutex"))
                lock = new DataMutex(client, w[2], data);
            else if (w[3].equals("read"))
                lock = new InterProcessReadWriteLock(client, w[2], data).readLock();
            else if (w[3].equals("write"))
                lock = new InterProcessReadWriteLock(client, w[2], data).writeLock();
            else {
                say("error " + id + " no lock kind " + w[3]);
                return;
            }
            Holder h = new Holder(id, lock);
            holders.put(id, h);
            h.start();
            return;
        }
        case "release":
        case "cancel": {
            Holder h = holders.get(id);
            if (h == null) {
                say("error " + id + " no such lock");
                return;
            }
            if (w[0].equals("release"))
                h.todo.add("release");
            else
                h.interrupt();
            return;
        }
        case "quit":
            System.exit(0);
            return;
        default:
            say("error " + id + " unknown command " + w[0]);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CuratorDriver <connect-string> <session-timeout-ms>");
            System.exit(2);
        }
        /* Curator keeps the node's path to itself; the test wants its czxid. */
        lockPath = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        lockPath.setAccessible(true);
        int session = Integer.parseInt(args[1]);
        client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(session)
            .connectionTimeoutMs(Math.min(session, 15000))
            .retryPolicy(new RetryForever(100))
            .build();
        client.start();
        client.blockUntilConnected();
        say("ready");
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null)
            command(line);
        System.exit(0);
    }
}
