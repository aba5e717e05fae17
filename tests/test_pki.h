// A certificate authority for tests, made at run time with OpenSSL: CAs,
// server certificates for localhost and 127.0.0.1, and client certificates
// with a chosen CN and O (rescaled reads the user from the CN and the role
// from the O). Keys are P-256; certificates are valid from an hour ago for
// ten years. Test use only.
#ifndef RESCALE_TESTS_TEST_PKI_H_
#define RESCALE_TESTS_TEST_PKI_H_

#include <memory>
#include <string>

namespace rescale::testing {

struct PemPair {
  std::string certificate;
  std::string private_key;
};

class TestCa {
 public:
  explicit TestCa(const std::string& name);
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& certificate() const { return certificate_; }
  // For a server: SANs DNS:localhost and IP:127.0.0.1, serverAuth.
  PemPair IssueServer(const std::string& common_name = "localhost") const;
  // For a client: subject CN=`user`, O=`organization` (omitted when
  // empty), clientAuth.
  PemPair IssueClient(const std::string& user, const std::string& organization) const;

 private:
  struct Key;
  PemPair Issue(const std::string& common_name, const std::string& organization, bool server) const;

  std::unique_ptr<Key> key_;
  std::string certificate_;
};

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_TEST_PKI_H_
