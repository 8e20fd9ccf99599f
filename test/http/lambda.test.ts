import { createLambdaApp, createMiddyApp } from './apps/lambda-app.js';
import { describeMatrix } from './matrix.js';

// The shared matrix through idemkit/lambda, once per event shape API Gateway and Lambda send,
// and through the middy middleware.
describeMatrix('lambda, API Gateway REST (v1)', createLambdaApp('rest'));
describeMatrix('lambda, HTTP API (v2)', createLambdaApp('http-api'));
describeMatrix('lambda, Function URL', createLambdaApp('function-url'));
describeMatrix('middy, API Gateway REST (v1)', createMiddyApp('rest'));
describeMatrix('middy, HTTP API (v2)', createMiddyApp('http-api'));
