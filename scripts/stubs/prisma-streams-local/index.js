// `prisma dev` is not used here; see package.json's description.
export function startLocalDurableStreamsServer() {
  throw new Error('@prisma/streams-local is stubbed out in idemkit (package.json overrides): `prisma dev` is not supported in this repository');
}
