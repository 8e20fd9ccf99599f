import { POSTGRES, requireService } from '../support/services.js';
import { postgresDatabase } from '../support/databases.js';
import { describeGuards } from './guards-contract.js';

describeGuards('PostgreSQL', await requireService(POSTGRES), postgresDatabase);
