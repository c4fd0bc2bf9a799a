// libsodium from Debian's libsodium-dev, for Argon2id password hashing (crypto_pwhash_argon2id_*).
#include <sodium.h>
