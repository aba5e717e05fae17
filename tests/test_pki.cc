// TestCa: OpenSSL 3 certificate issuing for tests (see tests/test_pki.h).
#include "tests/test_pki.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <stdexcept>

namespace rescale::testing {
namespace {

std::atomic<long> next_serial{1};

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test PKI: ") + what + " failed");
}

std::string ToPem(X509* certificate) {
  BIO* bio = BIO_new(BIO_s_mem());
  Check(PEM_write_bio_X509(bio, certificate) == 1, "PEM_write_bio_X509");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

std::string ToPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  Check(PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1,
        "PEM_write_bio_PrivateKey");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

void AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  Check(extension != nullptr, "X509V3_EXT_conf_nid");
  X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
}

// A certificate for `key`, subject CN/O, signed by issuer_key (and named
// after issuer; null issuer = self-signed).
X509* MakeCertificate(EVP_PKEY* key, const std::string& common_name,
                      const std::string& organization, X509* issuer, EVP_PKEY* issuer_key) {
  X509* certificate = X509_new();
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), next_serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -3600);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 10L * 365 * 24 * 3600);
  X509_set_pubkey(certificate, key);
  X509_NAME* name = X509_get_subject_name(certificate);
  if (!organization.empty()) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(organization.c_str()), -1, -1,
                               0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(certificate, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  return certificate;
}

}  // namespace

struct TestCa::Key {
  EVP_PKEY* key = nullptr;
  X509* certificate = nullptr;
  ~Key() {
    X509_free(certificate);
    EVP_PKEY_free(key);
  }
};

TestCa::TestCa(const std::string& name) : key_(std::make_unique<Key>()) {
  key_->key = EVP_EC_gen("P-256");
  Check(key_->key != nullptr, "EVP_EC_gen");
  key_->certificate = MakeCertificate(key_->key, name, "", nullptr, nullptr);
  AddExtension(key_->certificate, key_->certificate, NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(key_->certificate, key_->certificate, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(key_->certificate, key_->certificate, NID_subject_key_identifier, "hash");
  Check(X509_sign(key_->certificate, key_->key, EVP_sha256()) > 0, "X509_sign");
  certificate_ = ToPem(key_->certificate);
}

TestCa::~TestCa() = default;

PemPair TestCa::IssueServer(const std::string& common_name) const {
  return Issue(common_name, "", /*server=*/true);
}

PemPair TestCa::IssueClient(const std::string& user, const std::string& organization) const {
  return Issue(user, organization, /*server=*/false);
}

PemPair TestCa::Issue(const std::string& common_name, const std::string& organization,
                      bool server) const {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  Check(key != nullptr, "EVP_EC_gen");
  X509* certificate = MakeCertificate(key, common_name, organization, key_->certificate, key_->key);
  AddExtension(certificate, key_->certificate, NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(certificate, key_->certificate, NID_key_usage,
               "critical,digitalSignature,keyEncipherment");
  AddExtension(certificate, key_->certificate, NID_ext_key_usage,
               server ? "serverAuth" : "clientAuth");
  AddExtension(certificate, key_->certificate, NID_authority_key_identifier, "keyid:always");
  if (server) {
    AddExtension(certificate, key_->certificate, NID_subject_alt_name,
                 "DNS:localhost,IP:127.0.0.1");
  }
  Check(X509_sign(certificate, key_->key, EVP_sha256()) > 0, "X509_sign");
  PemPair pair{ToPem(certificate), ToPem(key)};
  X509_free(certificate);
  EVP_PKEY_free(key);
  return pair;
}

}  // namespace rescale::testing
