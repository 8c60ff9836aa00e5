"""Throw-away certificate authorities for the TLS tests, made at run time
with the openssl command (nothing secret is committed). Used by
test_tls.py and the client libraries' tests (test_client_python.py,
test_client_node.py)."""

import os
import shutil
import subprocess


def have_openssl():
    return shutil.which("openssl") is not None


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


class Pki:
    """A CA and certificates signed by it, in dir (all made at run time)."""

    CA_CNF = ("[ca]\ndefault_ca = d\n[d]\ndir = .\ndatabase = index.txt\nnew_certs_dir = .\n"
              "serial = serial\ndefault_md = sha256\npolicy = p\ncopy_extensions = copy\n"
              "[p]\ncommonName = supplied\n")

    def __init__(self, dir, name="ca"):
        self.dir = dir
        self.name = name
        os.makedirs(dir, exist_ok=True)
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
                "-subj", "/CN=lockbroker test " + name, cwd=dir)
        self.ca = os.path.join(dir, name + ".pem")

    def issue(self, cn, server=False, expired=False, file=None):
        """A key and certificate for cn: (cert path, key path); key mode 0600.
        A server certificate is for IP 127.0.0.1 and DNS localhost."""
        file = file or cn
        ext = os.path.join(self.dir, file + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = "
                    "serverAuth\n" if server else "extendedKeyUsage = clientAuth\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", file + ".key", "-out", file + ".csr", "-subj", "/CN=" + cn,
                cwd=self.dir)
        os.chmod(os.path.join(self.dir, file + ".key"), 0o600)
        if expired:
            with open(os.path.join(self.dir, "ca.cnf"), "w") as f:
                f.write(self.CA_CNF)
            open(os.path.join(self.dir, "index.txt"), "w").close()
            with open(os.path.join(self.dir, "serial"), "w") as f:
                f.write("1000\n")
            openssl("ca", "-batch", "-config", "ca.cnf", "-cert", self.name + ".pem",
                    "-keyfile", self.name + ".key", "-in", file + ".csr", "-out", file + ".pem",
                    "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext",
                    "-extfile", file + ".ext", cwd=self.dir)
        else:
            openssl("x509", "-req", "-in", file + ".csr", "-CA", self.name + ".pem", "-CAkey",
                    self.name + ".key", "-CAcreateserial", "-out", file + ".pem", "-days", "2",
                    "-extfile", file + ".ext", cwd=self.dir)
        return os.path.join(self.dir, file + ".pem"), os.path.join(self.dir, file + ".key")

    def _ca_db(self):
        """openssl ca's database, made once."""
        if not os.path.exists(os.path.join(self.dir, "ca.cnf")):
            with open(os.path.join(self.dir, "ca.cnf"), "w") as f:
                f.write(self.CA_CNF)
        if not os.path.exists(os.path.join(self.dir, "index.txt")):
            open(os.path.join(self.dir, "index.txt"), "w").close()
        if not os.path.exists(os.path.join(self.dir, "serial")):
            with open(os.path.join(self.dir, "serial"), "w") as f:
                f.write("1000\n")

    def revoke(self, cert):
        """Adds cert (a path issued by this CA) to the revoked ones of crl()."""
        self._ca_db()
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", self.name + ".pem",
                "-keyfile", self.name + ".key", "-revoke", cert, cwd=self.dir)

    def crl(self, file=None, expired=False):
        """A PEM CRL of this CA listing what revoke() revoked (none at first),
        valid for a day or, with expired, past its next update. Returns its path."""
        self._ca_db()
        out = os.path.join(self.dir, file or self.name + "-crl.pem")
        when = (["-crl_lastupdate", "20200101000000Z", "-crl_nextupdate", "20200102000000Z"]
                if expired else ["-crldays", "1"])
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", self.name + ".pem",
                "-keyfile", self.name + ".key", "-gencrl", "-out", out, *when, cwd=self.dir)
        return out


def tls_section(cert, key, ca, client_certs="optional"):
    """A [tls] section listening on a free loopback port."""
    return ("[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\nkey_file = %s\nca_file = %s\n"
            "client_certs = %s\n" % (cert, key, ca, client_certs))


TLS_LISTEN_RE = r"TLS on (\S+), client certificates (\w+)"
