// A real OpenID Connect provider for the tests: npm's `oidc-provider` (an OpenID-certified
// implementation) with its own login page that checks passwords, the authorization code flow
// with PKCE, and the device authorization grant. A fresh signing key at every start, so a
// restart on the same port is a key rotation.
//
//   node provider.mjs --port 0 --redirect http://127.0.0.1:3000/auth/oidc/callback
//
// Prints `issuer=URL` on stdout once it listens. People: see ACCOUNTS.

import http from 'node:http';
import crypto from 'node:crypto';
import Provider, { interactionPolicy } from 'oidc-provider';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const port = Number(args.port ?? 0);
const redirects = (args.redirect ?? '').split(',').filter(Boolean);

// Passwords are checked; groups, names and a Unix account are claims (the groups claim has a
// path, a plain name and an admin group, as Keycloak and Entra send them).
export const ACCOUNTS = {
  'oidc-alice': {
    password: 'alice-sso-password-1',
    claims: {
      preferred_username: 'Oidc-Alice',
      name: 'Alice Liddell',
      email: 'alice@lab.example',
      email_verified: true,
      groups: ['/lab/vision', 'gpu-users'],
      unix_user: 'oidcalice',
    },
  },
  'oidc-bob': {
    password: 'bob-sso-password-1',
    claims: {
      preferred_username: 'oidc-bob@lab.example',
      name: 'Bob Admin',
      email: 'bob@lab.example',
      email_verified: true,
      groups: ['lanes-admins'],
    },
  },
  'ldapada': {
    password: 'ada-sso-password-1',
    claims: { preferred_username: 'ldapada', name: 'Ada (SSO)', groups: [] },
  },
  'oidc-mallory': {
    password: 'mallory-sso-password-1',
    // Chooses the name of the tests' local admin.
    claims: { preferred_username: 'root', name: 'Mallory' },
  },
};

const server = http.createServer();
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };

// Consent is the lab's own app: granted without a screen, as Keycloak does for first parties.
const policy = interactionPolicy.base();
policy.remove('consent');

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'lanes',
    client_secret: 'lanes-client-secret-1',
    redirect_uris: redirects,
    grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: { keys: [jwk] },
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
    unix: ['unix_user'],
  },
  scopes: ['openid', 'profile', 'email', 'groups', 'unix'],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    deviceFlow: { enabled: true },
  },
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid profile email groups unix');
    grant.addOIDCClaims(['name', 'preferred_username', 'email', 'email_verified', 'groups', 'unix_user']);
    await grant.save();
    return grant;
  },
  findAccount: async (ctx, id) => {
    const account = ACCOUNTS[id];
    if (!account) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...account.claims }) };
  },
  ttl: { AccessToken: 600, AuthorizationCode: 60, DeviceCode: 300, IdToken: 600, Interaction: 600, Session: 600, Grant: 600 },
});

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(uid, message) {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Test Lab sign-in</title></head>
<body><h1>Test Lab sign-in</h1>${message ? `<p role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>Username <input name="login" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form></body></html>`;
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString());
}

// The login page (the provider's interaction), in front of the provider's own routes.
const callback = provider.callback();
server.on('request', async (req, res) => {
  const match = req.url.match(/^\/interaction\/([\w-]+)(\/login)?$/);
  if (!match) return callback(req, res);
  try {
    const details = await provider.interactionDetails(req, res);
    if (req.method === 'GET') {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      return res.end(page(details.uid));
    }
    const form = await body(req);
    const account = ACCOUNTS[form.get('login')];
    if (!account || form.get('password') !== account.password) {
      res.statusCode = 401;
      res.setHeader('content-type', 'text/html; charset=utf-8');
      return res.end(page(details.uid, 'Wrong username or password.'));
    }
    await provider.interactionFinished(req, res, { login: { accountId: form.get('login') } }, { mergeWithLastSubmission: false });
  } catch (err) {
    res.statusCode = 400;
    res.end(String(err));
  }
});

process.stdout.write(`issuer=${issuer}\n`);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
