#!/bin/sh
# Run once by the postgres image when it initializes its volume (docker-compose.replica.yml mounts
# it into /docker-entrypoint-initdb.d): lets a standby stream this server's WAL, password-checked as
# every other connection is. The image's own pg_hba.conf admits no replication connection from
# another container.
set -e
echo "host replication all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
