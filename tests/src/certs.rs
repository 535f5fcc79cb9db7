//! A throwaway test PKI, written as PEM files into a directory.
//!
//! [`Pki::generate`] makes, in one call (ECDSA P-256 keys, a few milliseconds):
//!
//! | file | what |
//! | --- | --- |
//! | `ca.pem` | the test CA (its key is not written) |
//! | `server.pem`, `server-key.pem` | server certificate for `localhost` and `127.0.0.1` |
//! | `client.pem`, `client-key.pem` | client certificate, for mutual TLS |
//! | `expired.pem`, `expired-key.pem` | server certificate (as above) that expired in 2001 |
//! | `wrong-name.pem`, `wrong-name-key.pem` | server certificate for `wrong.example` only |
//! | `other-ca.pem` | an unrelated CA, for a client that trusts the wrong one |
//!
//! Every certificate but `other-ca.pem` is signed by `ca.pem`. Keys are random on each call;
//! names, dates and file names are fixed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

/// The CA's file (see the [module docs](self)).
pub const CA_FILE: &str = "ca.pem";
/// The unrelated CA's file.
pub const OTHER_CA_FILE: &str = "other-ca.pem";

/// Which server certificate a TLS server presents; all are signed by the test CA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ServerCert {
    /// Valid now, for `localhost` and `127.0.0.1`: `server.pem`.
    #[default]
    Good,
    /// Same names, but valid only during 2000: `expired.pem`.
    Expired,
    /// Valid now, but only for `wrong.example`: `wrong-name.pem`.
    WrongName,
}

impl ServerCert {
    /// The file stem: the certificate is `<stem>.pem`, its key `<stem>-key.pem`.
    pub fn stem(self) -> &'static str {
        match self {
            ServerCert::Good => "server",
            ServerCert::Expired => "expired",
            ServerCert::WrongName => "wrong-name",
        }
    }
}

/// The PEM files of a generated test PKI, all in one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Generates every certificate and key of the [module docs](self) into `dir` (which
    /// must exist), replacing files of the same names.
    pub fn generate(dir: &Path) -> io::Result<Pki> {
        let pki = Pki { dir: dir.to_path_buf() };
        let (ca, ca_key) = new_ca("pelican test CA")?;
        pki.write(CA_FILE, &ca.self_signed(&ca_key).map_err(other)?.pem())?;
        let issuer = Issuer::new(ca, ca_key);

        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let loopback = ["localhost", "127.0.0.1"];
        pki.leaf(&issuer, ServerCert::Good.stem(), &loopback, ServerAuth, false)?;
        pki.leaf(&issuer, ServerCert::Expired.stem(), &loopback, ServerAuth, true)?;
        pki.leaf(&issuer, ServerCert::WrongName.stem(), &["wrong.example"], ServerAuth, false)?;
        pki.leaf(&issuer, "client", &["client.pelican.test"], ClientAuth, false)?;

        let (unrelated, unrelated_key) = new_ca("unrelated CA")?;
        pki.write(OTHER_CA_FILE, &unrelated.self_signed(&unrelated_key).map_err(other)?.pem())?;
        Ok(pki)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `ca.pem`: the CA that signed every certificate here but `other-ca.pem`.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    /// `other-ca.pem`: a CA that signed nothing here.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join(OTHER_CA_FILE)
    }

    /// The certificate file of server certificate `which`, e.g. `server.pem`.
    pub fn server_cert_of(&self, which: ServerCert) -> PathBuf {
        self.dir.join(format!("{}.pem", which.stem()))
    }

    /// The key file of server certificate `which`, e.g. `server-key.pem`.
    pub fn server_key_of(&self, which: ServerCert) -> PathBuf {
        self.dir.join(format!("{}-key.pem", which.stem()))
    }

    /// `server.pem`: the good server certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.server_cert_of(ServerCert::Good)
    }

    /// `server-key.pem`.
    pub fn server_key(&self) -> PathBuf {
        self.server_key_of(ServerCert::Good)
    }

    /// `expired.pem`: a server certificate valid only during 2000.
    pub fn expired_cert(&self) -> PathBuf {
        self.server_cert_of(ServerCert::Expired)
    }

    /// `expired-key.pem`.
    pub fn expired_key(&self) -> PathBuf {
        self.server_key_of(ServerCert::Expired)
    }

    /// `wrong-name.pem`: a server certificate for `wrong.example` only.
    pub fn wrong_name_cert(&self) -> PathBuf {
        self.server_cert_of(ServerCert::WrongName)
    }

    /// `wrong-name-key.pem`.
    pub fn wrong_name_key(&self) -> PathBuf {
        self.server_key_of(ServerCert::WrongName)
    }

    /// `client.pem`: a client certificate (for `client.pelican.test`), for mutual TLS.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// `client-key.pem`.
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client-key.pem")
    }

    /// Writes `<stem>.pem` and `<stem>-key.pem`: a certificate for `names` signed by `issuer`.
    fn leaf(
        &self,
        issuer: &Issuer<'_, KeyPair>,
        stem: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> io::Result<()> {
        let key = KeyPair::generate().map_err(other)?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.subject_alt_names = names
            .iter()
            .map(|name| match name.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => name.to_string().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()
            .map_err(other)?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        if expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2001, 1, 1);
        } else {
            set_valid(&mut params);
        }
        let cert = params.signed_by(&key, issuer).map_err(other)?;
        self.write(&format!("{stem}.pem"), &cert.pem())?;
        self.write(&format!("{stem}-key.pem"), &key.serialize_pem())
    }

    fn write(&self, name: &str, pem: &str) -> io::Result<()> {
        fs::write(self.dir.join(name), pem)
    }
}

/// A CA's parameters (named `name`) and key.
fn new_ca(name: &str) -> io::Result<(CertificateParams, KeyPair)> {
    let key = KeyPair::generate().map_err(other)?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_valid(&mut params);
    Ok((params, key))
}

/// Fixed dates that bracket any test run.
fn set_valid(params: &mut CertificateParams) {
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2200, 1, 1);
}

fn other(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("rcgen: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    #[test]
    fn writes_every_file() {
        let dir = std::env::temp_dir().join(format!("pelican-tests-certs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki::generate(&dir).unwrap();
        assert_eq!(pki.dir(), dir);
        let certs = [pki.ca(), pki.other_ca(), pki.server_cert(), pki.client_cert()];
        let certs = certs.into_iter().chain([pki.expired_cert(), pki.wrong_name_cert()]);
        for cert in certs {
            CertificateDer::from_pem_file(&cert).unwrap_or_else(|e| panic!("{cert:?}: {e}"));
        }
        let keys = [pki.server_key(), pki.client_key(), pki.expired_key(), pki.wrong_name_key()];
        for key in keys {
            PrivateKeyDer::from_pem_file(&key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 10);
        assert_ne!(fs::read(pki.ca()).unwrap(), fs::read(pki.other_ca()).unwrap());
        fs::remove_dir_all(&dir).unwrap();
    }
}
