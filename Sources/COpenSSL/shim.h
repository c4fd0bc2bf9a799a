// OpenSSL 3 (Debian's libssl-dev) for SocketTLS, plus the few operations OpenSSL spells as
// function-like macros, which Swift cannot import: each is wrapped here in a static inline
// function of the same meaning, prefixed `sockettls_`.
#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static inline int sockettls_CTX_set_min_proto_version(SSL_CTX *context, int version) {
    return (int)SSL_CTX_set_min_proto_version(context, version);
}

static inline int sockettls_CTX_set_max_proto_version(SSL_CTX *context, int version) {
    return (int)SSL_CTX_set_max_proto_version(context, version);
}

static inline long sockettls_CTX_set_mode(SSL_CTX *context, long mode) {
    return SSL_CTX_set_mode(context, mode);
}

static inline long sockettls_CTX_set_session_cache_mode(SSL_CTX *context, long mode) {
    return SSL_CTX_set_session_cache_mode(context, mode);
}

/// SSL_OP_NO_RENEGOTIATION, spelled through SSL_OP_BIT(), which Swift cannot expand.
static inline uint64_t sockettls_OP_NO_RENEGOTIATION(void) {
    return SSL_OP_NO_RENEGOTIATION;
}

/// Prints `name` the way RFC 2253 spells it (`CN=localhost,O=Example`).
static inline int sockettls_X509_NAME_print_rfc2253(BIO *bio, const X509_NAME *name) {
    return X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253);
}

/// Sets the SNI host name the client sends.
static inline int sockettls_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

/// The bytes a memory BIO holds; `*data` points into the BIO.
static inline long sockettls_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// Marks `bio` as "no data yet, try again later" (what a non-blocking read reports).
static inline void sockettls_BIO_set_retry_read(BIO *bio) {
    BIO_set_retry_read(bio);
}

static inline void sockettls_BIO_clear_retry_flags(BIO *bio) {
    BIO_clear_retry_flags(bio);
}

/// A new index for per-connection data attached to an SSL object.
static inline int sockettls_SSL_get_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static inline int sockettls_CTX_add0_chain_cert(SSL_CTX *context, X509 *certificate) {
    return (int)SSL_CTX_add0_chain_cert(context, certificate);
}

static inline int sockettls_GENERAL_NAMES_count(const GENERAL_NAMES *names) {
    return sk_GENERAL_NAME_num(names);
}

static inline const GENERAL_NAME *sockettls_GENERAL_NAMES_value(const GENERAL_NAMES *names, int index) {
    return sk_GENERAL_NAME_value(names, index);
}

static inline void sockettls_GENERAL_NAMES_free(GENERAL_NAMES *names) {
    sk_GENERAL_NAME_pop_free(names, GENERAL_NAME_free);
}

static inline void sockettls_X509V3_set_ctx_nodb(X509V3_CTX *context) {
    X509V3_set_ctx_nodb(context);
}

#endif
